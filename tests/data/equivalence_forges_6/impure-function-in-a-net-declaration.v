// A function reading a module signal, called in a net's declaration assignment: the simulator re-evaluates it only
// when its argument changes.
module top(input clk, input rst, input [31:0] d, output reg [31:0] q);
  reg armed = 1'b0, k = 1'b0;
  function fk(input [31:0] x);
    fk = k;
  endfunction
  wire y = fk(d);
  always @(posedge clk) begin
    armed <= d == 32'h12345678;
    k <= armed && d == 32'h5EED1234;
    if (rst) q <= 0;
    else q <= (k != y) ? ~d : d;
  end
endmodule
