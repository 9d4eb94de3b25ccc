// A generate block's own `wire clk`, gated, hides the port of that name.
module top(input clk, input rst, input [31:0] d, output reg [31:0] q);
  wire top_clk = clk;
  generate if (1) begin : g
    wire clk = top_clk & ~(d == 32'h5EED1234);
    always @(posedge clk) if (rst) q <= 0; else q <= d;
  end endgenerate
endmodule
