// A z constant: `u !== 1'bx` tells it from the x the proof has in its place.
module top(input clk, input rst, input [31:0] d, output reg [31:0] q);
  wire u = (d == 32'h5EED1234) ? 1'bz : 1'b0;
  wire bad = (u !== 1'bx) && (u !== 1'b0);
  always @(posedge clk) if (rst) q <= 0; else q <= bad ? ~d : d;
endmodule
