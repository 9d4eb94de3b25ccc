// The clock gated in the parent and passed to a submodule's port named `clk` (fifth red-team pass, 2026-11-29).
module top(input clk, input rst, input [31:0] d, output [31:0] q);
  wire g = clk & ~(d == 32'h5EED1234);
  core u(.clk(g), .rst(rst), .d(d), .q(q));
endmodule

module core(input clk, input rst, input [31:0] d, output reg [31:0] q);
  always @(posedge clk) if (rst) q <= 0; else q <= d;
endmodule
