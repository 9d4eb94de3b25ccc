// A negedge and a posedge copy of the input: the proof steps both in one frame (always equal), the simulator half a
// cycle apart.
module top(input clk, input rst, input [31:0] d, output [31:0] q);
  reg [31:0] n = 0, p = 0, r;
  always @(negedge clk) n <= d;
  always @(posedge clk) p <= d;
  always @(posedge clk) if (rst) r <= 0; else r <= d;
  assign q = (n != p && d == 32'h5EED1234) ? ~r : r;
endmodule
