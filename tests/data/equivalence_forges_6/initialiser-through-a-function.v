// A variable initialised from a signal, through a function.
module top(input clk, input rst, input [31:0] d, output reg [31:0] q);
  function [31:0] cur(input dummy);
    cur = d;
  endfunction
  reg [31:0] k = cur(1'b0);
  always @(posedge clk) if (rst) q <= 0; else q <= (d == 32'h5EED1234) ? k : d;
endmodule
