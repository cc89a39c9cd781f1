/* zerotrain: protobuf-c messages as JSON (see pbjson.h). */
#define _POSIX_C_SOURCE 200809L
#include "proto/pbjson.h"

#include <ctype.h>
#include <math.h>
#include <string.h>

#include "common/alloc.h"
#include "common/utf8.h"

/* Length of the "JOB_STATE_" prefix that value names of enum `type` start with, 0 if not. */
static size_t enum_prefix_len(const ProtobufCEnumDescriptor *type, const char *value)
{
    char prefix[128];
    size_t n = 0;
    const char *s = type->short_name;
    for (size_t i = 0; s[i] && n + 3 < sizeof(prefix); i++) {
        if (i > 0 && isupper((unsigned char)s[i]) && !isupper((unsigned char)s[i - 1]))
            prefix[n++] = '_';
        prefix[n++] = (char)toupper((unsigned char)s[i]);
    }
    prefix[n++] = '_';
    prefix[n] = '\0';
    return strncmp(value, prefix, n) == 0 && value[n] ? n : 0;
}

const char *zt_pb_enum_short_name(const ProtobufCEnumDescriptor *type, int value)
{
    const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(type, value);
    if (!v) return "?";
    return v->name + enum_prefix_len(type, v->name);
}

static json_t *base64(const uint8_t *data, size_t len)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t out_len = 4 * ((len + 2) / 3);
    char *out = zt_malloc(out_len + 1);
    if (!out) return NULL;
    size_t j = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)data[i] << 16;
        if (i + 1 < len) v |= (uint32_t)data[i + 1] << 8;
        if (i + 2 < len) v |= data[i + 2];
        out[j++] = tbl[(v >> 18) & 63];
        out[j++] = tbl[(v >> 12) & 63];
        out[j++] = i + 1 < len ? tbl[(v >> 6) & 63] : '=';
        out[j++] = i + 2 < len ? tbl[v & 63] : '=';
    }
    out[j] = '\0';
    json_t *r = json_string(out);
    zt_free(out);
    return r;
}

/* JSON has no NaN or infinities: proto3's JSON mapping spells them as strings. */
static json_t *real_json(double v)
{
    if (isnan(v))
        return json_string("NaN");
    if (isinf(v))
        return json_string(v > 0 ? "Infinity" : "-Infinity");
    return json_real(v);
}

static json_t *value_json(const ProtobufCFieldDescriptor *f, const void *p)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        return json_integer(*(const int32_t *)p);
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        return json_integer(*(const uint32_t *)p);
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        return json_integer((json_int_t) * (const int64_t *)p);
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        return json_integer((json_int_t) * (const uint64_t *)p);
    case PROTOBUF_C_TYPE_FLOAT:
        return real_json(*(const float *)p);
    case PROTOBUF_C_TYPE_DOUBLE:
        return real_json(*(const double *)p);
    case PROTOBUF_C_TYPE_BOOL:
        return json_boolean(*(const protobuf_c_boolean *)p);
    case PROTOBUF_C_TYPE_ENUM:
        return json_string(zt_pb_enum_short_name(f->descriptor, *(const int *)p));
    case PROTOBUF_C_TYPE_STRING: {
        /* JSON text is UTF-8: bytes that are not (a peer that broke the protobuf rule) are
         * printed as '?', never a reason to print nothing */
        const char *s = *(char *const *)p;
        size_t n = s ? strlen(s) : 0;
        if (!n || zt_utf8_valid(s, n, NULL)) return json_stringn(n ? s : "", n);
        char *clean = zt_strndup(s, n);
        if (!clean) return NULL;
        zt_utf8_clean(clean, n);
        json_t *r = json_stringn(clean, n);
        zt_free(clean);
        return r;
    }
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *b = p;
        return base64(b->data, b->len);
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *m = *(ProtobufCMessage *const *)p;
        return m ? zt_pb_to_json(m) : json_null();
    }
    }
    return json_null();
}

static size_t type_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        return 4;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        return 8;
    case PROTOBUF_C_TYPE_FLOAT:
        return sizeof(float);
    case PROTOBUF_C_TYPE_DOUBLE:
        return sizeof(double);
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_ENUM:
        return sizeof(int);
    case PROTOBUF_C_TYPE_STRING:
        return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(ProtobufCMessage *);
    }
    return 0;
}

json_t *zt_pb_to_json(const ProtobufCMessage *msg)
{
    json_t *obj = json_object();
    if (!obj) return NULL;
    const ProtobufCMessageDescriptor *d = msg->descriptor;
    const char *base = (const char *)msg;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        json_t *v;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + f->quantifier_offset);
            const char *arr = *(char *const *)(base + f->offset);
            size_t sz = type_size(f->type);
            v = json_array();
            for (size_t k = 0; v && k < n; k++) {
                if (json_array_append_new(v, value_json(f, arr + k * sz)) != 0) {
                    json_decref(v);
                    v = NULL;
                }
            }
        } else {
            v = value_json(f, base + f->offset);
        }
        if (!v || json_object_set_new(obj, f->name, v) != 0) {
            json_decref(obj);
            return NULL;
        }
    }
    return obj;
}
