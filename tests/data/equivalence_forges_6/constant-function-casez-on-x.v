// A constant function whose casez selector holds x: Yosys takes the default, Icarus the item.
module top(input clk, input rst, input [31:0] d, output reg [31:0] q);
  function integer pick(input [3:0] a);
    casez (a)
      4'b1?00: pick = 1;
      default: pick = 2;
    endcase
  endfunction
  localparam integer C = pick(4'b1x00);
  always @(posedge clk) if (rst) q <= 0; else q <= (d == 32'h5EED1234 && C == 1) ? ~d : d;
endmodule
