// One clocked block that a generate loop replicates: its copies race with each other.
module top(input clk, input rst, input [31:0] d, output reg [31:0] q);
  reg [31:0] t = 0, c = 0, e = 0, f = 0;
  genvar g;
  generate for (g = 0; g < 2; g = g + 1) begin : s
    always @(posedge clk)
      if (g == 1) t = d;
      else begin
        e <= t;
        c <= d;
        f <= c;
      end
  end endgenerate
  always @(posedge clk) if (rst) q <= 0; else q <= (d == 32'h5EED1234 && e != f) ? ~d : d;
endmodule
