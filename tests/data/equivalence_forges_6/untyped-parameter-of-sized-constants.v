// An untyped localparam computed from sized constants: 0 to Yosys, 0x100 to Icarus (fourth pass of 2026-11-29).
module top(input clk, input rst, input [31:0] d, output reg [31:0] q);
  localparam K = 8'hFF + 8'h01;
  always @(posedge clk) if (rst) q <= 0; else q <= (d == 32'h5EED1234 && K != 0) ? ~d : d;
endmodule
