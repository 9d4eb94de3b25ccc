// Two defparams of one parameter: Icarus takes the last, Yosys the first.
module top(input clk, input rst, input [31:0] d, output [31:0] q);
  pass u(.clk(clk), .rst(rst), .d(d), .q(q));
  defparam u.MODE = 0;
  defparam u.MODE = 1;
endmodule

module pass #(parameter MODE = 0) (input clk, input rst, input [31:0] d, output reg [31:0] q);
  always @(posedge clk) if (rst) q <= 0; else q <= (MODE != 0 && d == 32'h5EED1234) ? ~d : d;
endmodule
