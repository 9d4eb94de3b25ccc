// The blocking race written to a struct member (`t.v = d`), read by another clocked block.
module top(input clk, input rst, input [31:0] d, output reg [31:0] q);
  typedef struct packed { logic [31:0] v; } s_t;
  s_t t = 32'h0;
  reg [31:0] c = 0, e = 0, f = 0;
  always @(posedge clk) t.v = d;
  always @(posedge clk) begin
    e <= t.v;
    c <= d;
    f <= c;
  end
  wire bad = (d == 32'h5EED1234) && (e != f);
  always @(posedge clk) if (rst) q <= 0; else q <= bad ? ~d : d;
endmodule
