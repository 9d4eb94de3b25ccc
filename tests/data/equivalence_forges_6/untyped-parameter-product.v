// The same with a product: 1 to Yosys, 225 to Icarus.
module top(input clk, input rst, input [31:0] d, output reg [31:0] q);
  localparam K = 4'hF * 4'hF;
  always @(posedge clk) if (rst) q <= 0; else q <= (d == 32'h5EED1234 && K > 4'hF) ? ~d : d;
endmodule
