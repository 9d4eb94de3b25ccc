// `$size` of a sized constant: 8 to Yosys, x to Icarus.
module top(input clk, input rst, input [31:0] d, output reg [31:0] q);
  localparam integer S = $size(8'hFF);
  always @(posedge clk) if (rst) q <= 0; else q <= (d == 32'h5EED1234 && S != 8) ? ~d : d;
endmodule
