// Icarus applies the defparam over the instance's own override, Yosys keeps the override.
module top(input clk, input rst, input [31:0] d, output [31:0] q);
  pass #(.MODE(0)) u(.clk(clk), .rst(rst), .d(d), .q(q));
  defparam u.MODE = 1;
endmodule

module pass #(parameter MODE = 0) (input clk, input rst, input [31:0] d, output reg [31:0] q);
  always @(posedge clk) if (rst) q <= 0; else q <= (MODE != 0 && d == 32'h5EED1234) ? ~d : d;
endmodule
