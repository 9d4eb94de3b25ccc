// A submodule's clocked block writes its output with a blocking assignment; the parent's clocked block reads it:
// the simulator's order of the two blocks decides.
module stage(input clk, input [31:0] d, output reg [31:0] t = 0);
  always @(posedge clk) t = d;
endmodule

module top(input clk, input rst, input [31:0] d, output [31:0] q);
  wire [31:0] t;
  reg [31:0] c = 0, e = 0, f = 0, r;
  stage s(.clk(clk), .d(d), .t(t));
  always @(posedge clk) begin
    c <= d;
    e <= t;
    f <= c;
  end
  always @(posedge clk) if (rst) r <= 0; else r <= d;
  assign q = (e != f && d == 32'h5EED1234) ? ~r : r;
endmodule
