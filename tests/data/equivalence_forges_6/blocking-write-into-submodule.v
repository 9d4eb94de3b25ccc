// The parent's clocked block writes `t` with `=`; a submodule's clocked block reads it through its input port: the
// simulator runs the parent's block first, the proof a frame apart.
module stage(input clk, input [31:0] t, output reg [31:0] e);
  always @(posedge clk) e <= t;
endmodule

module top(input clk, input rst, input [31:0] d, output reg [31:0] q);
  reg [31:0] t = 0, c = 0, f = 0;
  wire [31:0] e;
  always @(posedge clk) t = d;
  stage s(.clk(clk), .t(t), .e(e));
  always @(posedge clk) begin
    c <= d;
    f <= c;
  end
  wire bad = (d == 32'h5EED1234) && (e != f);
  always @(posedge clk) if (rst) q <= 0; else q <= bad ? ~d : d;
endmodule
