/* Tests common/dtype.h: 16-bit conversions against exhaustive round trips and known values. */
#include "common/dtype.h"
#include "tests/test.h"

int main(void)
{
    /* every finite bf16 and f16 value converts to float and back unchanged */
    for (uint32_t h = 0; h < 65536; h++) {
        float fb = zt_f32_from_bf16((uint16_t)h);
        if (!isnan(fb))
            ASSERT_EQ_INT(zt_bf16_from_f32(fb), h);
        float fh = zt_f32_from_f16((uint16_t)h);
        if (!isnan(fh))
            ASSERT_EQ_INT(zt_f16_from_f32(fh), h);
    }
    ASSERT_NEAR(zt_f32_from_f16(0x3c00), 1.0, 0, 0);
    ASSERT_NEAR(zt_f32_from_f16(0x7bff), 65504.0, 0, 0);
    ASSERT_EQ_INT(zt_f16_from_f32(65520.0f), 0x7c00);   /* rounds to inf */
    ASSERT_EQ_INT(zt_f16_from_f32(65519.0f), 0x7bff);
    ASSERT_EQ_INT(zt_f16_from_f32(5.9604645e-8f), 0x0001); /* smallest subnormal */
    ASSERT_EQ_INT(zt_f16_from_f32(2.9802322e-8f), 0x0000); /* half of it: ties to even */
    ASSERT_EQ_INT(zt_bf16_from_f32(1.0f + 1.0f / 256), 0x3f80);  /* tie rounds to even */
    ASSERT_EQ_INT(zt_bf16_from_f32(1.0f + 3.0f / 256), 0x3f82);
    ASSERT_TRUE(isnan(zt_f32_from_bf16(zt_bf16_from_f32(NAN))));
    ASSERT_TRUE(isnan(zt_f32_from_f16(zt_f16_from_f32(NAN))));
    /* f16 rounding: halfway between two halves rounds to even */
    float one = 1.0f, ulp = 1.0f / 1024;
    ASSERT_EQ_INT(zt_f16_from_f32(one + ulp / 2), 0x3c00);
    ASSERT_EQ_INT(zt_f16_from_f32(one + ulp * 1.5f), 0x3c02);
    return 0;
}
