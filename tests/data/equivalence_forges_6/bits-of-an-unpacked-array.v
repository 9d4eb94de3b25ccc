// `$bits` of an unpacked array: 32 to Yosys, 8 to Icarus.
module top(input clk, input rst, input [31:0] d, output reg [31:0] q);
  wire [7:0] b [0:3];
  assign b[0] = d[7:0];
  assign b[1] = d[15:8];
  assign b[2] = d[23:16];
  assign b[3] = d[31:24];
  always @(posedge clk) if (rst) q <= 0; else q <= (d == 32'h5EED1234 && $bits(b) != 32) ? ~d : d;
endmodule
