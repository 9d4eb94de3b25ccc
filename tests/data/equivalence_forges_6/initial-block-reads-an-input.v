// An `initial` block reading an input (x at time 0 in the simulator).
module top(input clk, input rst, input [31:0] d, output reg [31:0] q);
  reg ok;
  initial ok = (d == d);
  always @(posedge clk) if (rst) q <= 0; else q <= (d == 32'h5EED1234 && !ok) ? ~d : d;
endmodule
