#version 450
// out[t,:] = table[ids[t],:] * scale as f32 (WTYPE: the table's type; GGML blocks dequantized with the CPU backend's
// float operations); ids outside [0, all_rows) give a zero row.
#include "common.glsl"

layout(constant_id = 0) const uint WTYPE = WTYPE_F32;
layout(local_size_x = 256) in;
layout(binding = 0) buffer Ids { int ids[]; };
layout(binding = 1) buffer Table { uint table[]; };
layout(binding = 2) buffer Out { float out_[]; };
// table_off in 16-bit halves of the bound window, which holds rows row0 .. row0 + rows - 1 of all_rows (a table past
// one binding is read in windows, a dispatch each); row_bytes: the bytes of one table row.
layout(push_constant) uniform Push { uint ids_off, table_off, out_off, rows, cols, row_bytes; float scale; uint row0, all_rows; } p;

void main() {
    const uint c = gl_WorkGroupID.x * 256u + gl_LocalInvocationID.x, t = gl_WorkGroupID.y;
    if (c >= p.cols) return;
    const int id = ids[p.ids_off + t];
    float v = 0.0;
    if (id >= 0 && uint(id) < p.all_rows) {
        if (uint(id) < p.row0 || uint(id) - p.row0 >= p.rows) return;  // another window's row
        const uint r = uint(id) - p.row0;
        if (WTYPE >= WTYPE_Q4_K) {
            // The CPU's dequantize_row: (d * sc) * q - dmin * m; Q6_K (d * scale) * (q - 32).
            const uint block = 2u * p.table_off + r * p.row_bytes + (c / 256u) * kblock_bytes(WTYPE), e = c % 256u;
            if (WTYPE == WTYPE_Q6_K) {
                precise float ds = Q6K_D(table, block) * float(Q6K_SCALE(table, block, e / 16u));
                precise float dq = ds * float(Q6K_Q(table, block, e) - 32);
                v = dq;
            } else {
                precise float dj = BLOCK_D(table, block) * float(K_SC(table, block, e / 32u));
                precise float mj = BLOCK_M(table, block) * float(K_MIN(table, block, e / 32u));
                precise float dq = dj * float(K45_Q(table, WTYPE, block, e)) - mj;
                v = dq;
            }
        } else if (WTYPE >= WTYPE_Q8_0) {
            const uint block = 2u * p.table_off + r * p.row_bytes + (c / 32u) * block_bytes(WTYPE);
            precise float dq = BLOCK_D(table, block) * float(BLOCK_Q(table, WTYPE, block, c % 32u));
            if (block_has_m(WTYPE)) dq = dq + BLOCK_M(table, block);
            v = dq;
        } else {
            v = WEIGHT_AT(table, WTYPE, p.table_off + r * (p.row_bytes / 2u), c);
        }
        if (p.scale != 1.0) v *= p.scale;
    } else if (p.row0 != 0u) {
        return;  // the first window writes the zero rows
    }
    out_[p.out_off + t * p.cols + c] = v;
}
