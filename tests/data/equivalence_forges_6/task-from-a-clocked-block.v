// The blocking race moved into a task called from a clocked block.
module top(input clk, input rst, input [31:0] d, output reg [31:0] q);
  reg [31:0] t = 0, c = 0, e = 0, f = 0;
  task upd; begin t = d; end endtask
  always @(posedge clk) upd;
  always @(posedge clk) begin
    e <= t;
    c <= d;
    f <= c;
  end
  always @(posedge clk) if (rst) q <= 0; else q <= (d == 32'h5EED1234 && e != f) ? ~d : d;
endmodule
