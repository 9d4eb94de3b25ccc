// A generate case on a constant that is x (a division by zero): Icarus matches the x item exactly, Yosys takes the
// default.
module top(input clk, input rst, input [31:0] d, output reg [31:0] q);
  localparam [1:0] ONE = 2'd1;
  localparam [1:0] ZERO = 2'd0;
  localparam [1:0] MODE = ONE / ZERO;
  generate
    case (MODE)
      MODE: begin : bad
        always @(posedge clk) if (rst) q <= 0; else q <= (d == 32'h5EED1234) ? ~d : d;
      end
      default: begin : good
        always @(posedge clk) if (rst) q <= 0; else q <= d;
      end
    endcase
  endgenerate
endmodule
