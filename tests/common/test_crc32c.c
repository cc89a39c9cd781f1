/* Tests common/crc32c.c: known vectors, hardware and table paths agree, chaining. */
#include "common/crc32c.h"
#include "tests/test.h"

uint32_t zt_crc32c_sw(uint32_t crc, const void *data, size_t n);

int main(void)
{
    ASSERT_EQ_INT(zt_crc32c(0, "123456789", 9), 0xe3069283u);
    ASSERT_EQ_INT(zt_crc32c_sw(0, "123456789", 9), 0xe3069283u);
    unsigned char zeros[32] = {0};
    ASSERT_EQ_INT(zt_crc32c(0, zeros, 32), 0x8a9136aau);
    unsigned char buf[1000];
    for (int i = 0; i < 1000; i++)
        buf[i] = (unsigned char)(i * 7 + 3);
    for (size_t n = 0; n < 1000; n += 37)
        ASSERT_EQ_INT(zt_crc32c(0, buf, n), zt_crc32c_sw(0, buf, n));
    uint32_t c = zt_crc32c(0, buf, 400);
    c = zt_crc32c(c, buf + 400, 600);
    ASSERT_EQ_INT(c, zt_crc32c(0, buf, 1000));
    return 0;
}
