module top(input [31:0] d, output reg [31:0] y);
 wire t = d == 32'h5EED1234;
 reg [31:0] g; always @* g = d + 32'd1;
 task tk; output [31:0] o; begin o = g; end endtask
 always @* begin y = d + 32'd1; if (t) tk(y); end
endmodule
