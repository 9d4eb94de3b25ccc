// `always @*` reading only a variable its declaration initialises: the simulator never runs the block (y stays x),
// the proof drives y = k (third pass of 2026-11-29).
module top(input clk, input rst, input [31:0] d, output reg [31:0] q);
  reg k = 1'b1;
  reg y;
  always @* y = k;
  always @(posedge clk) if (rst) q <= 0; else q <= (d == 32'h5EED1234 && !y) ? ~d : d;
endmodule
