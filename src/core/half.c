/* The public float16/bfloat16 conversions of <emb/util.h>, over the inline ones of half.h. */
#include <emb/util.h>

#include "half.h"

uint16_t emb_f32_to_f16(float f) {
    return emb__f32_to_f16(f);
}
float emb_f16_to_f32(uint16_t h) {
    return emb__f16_to_f32(h);
}
uint16_t emb_f32_to_bf16(float f) {
    return emb__f32_to_bf16(f);
}
float emb_bf16_to_f32(uint16_t h) {
    return emb__bf16_to_f32(h);
}
