#version 450
// out[t,:] = table[ids[t],:] * scale as f32 (WTYPE: the table's type); ids outside [0, rows) give a zero row.
#include "common.glsl"

layout(constant_id = 0) const uint WTYPE = WTYPE_F32;
layout(local_size_x = 256) in;
layout(binding = 0) buffer Ids { int ids[]; };
layout(binding = 1) buffer Table { uint table[]; };
layout(binding = 2) buffer Out { float out_[]; };
layout(push_constant) uniform Push { uint ids_off, table_off, out_off, rows, cols; float scale; } p;

void main() {
    const uint c = gl_WorkGroupID.x * 256u + gl_LocalInvocationID.x, t = gl_WorkGroupID.y;
    if (c >= p.cols) return;
    const int id = ids[p.ids_off + t];
    float v = 0.0;
    if (id >= 0 && uint(id) < p.rows) {
        const uint row_halves = WTYPE == WTYPE_F32 ? 2u * p.cols : p.cols;
        v = WEIGHT_AT(table, WTYPE, p.table_off + uint(id) * row_halves, c) * p.scale;
    }
    out_[p.out_off + t * p.cols + c] = v;
}
