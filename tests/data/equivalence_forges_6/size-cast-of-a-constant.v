// A size cast of a constant sum: folded to 0 by Yosys, 0x100 by Icarus.
module top(input clk, input rst, input [31:0] d, output reg [31:0] q);
  wire [15:0] k = 16'(8'hFF + 8'h01);
  always @(posedge clk) if (rst) q <= 0; else q <= (d == 32'h5EED1234 && k[8]) ? ~d : d;
endmodule
