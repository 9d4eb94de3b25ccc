// `$random(seed)` in a `$display`: the simulator writes `seed`, the proof drops the print.
module top(input clk, input rst, input [31:0] d, output reg [31:0] q);
  integer seed = 0;
  always @(posedge clk) if (d == 32'h5EED1234) $display("%0d", $random(seed));
  always @(posedge clk) if (rst) q <= 0; else q <= (seed != 0) ? ~d : d;
endmodule
