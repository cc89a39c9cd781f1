/* zerotrain: protobuf-c messages as JSON (jansson), driven by the message descriptors, so
 * `zctl -o json` and the coordinator's JSON views print every RPC message the same way:
 * proto field names, every field present (defaults included), enums by name without their
 * type prefix ("QUEUED" for JOB_STATE_QUEUED), int64 as JSON integers, bytes as base64. */
#ifndef ZT_PROTO_PBJSON_H
#define ZT_PROTO_PBJSON_H

#include <jansson.h>
#include <protobuf-c/protobuf-c.h>

/* A new JSON object for msg (caller owns the reference); NULL on allocation failure only:
 * string fields that are not valid UTF-8 are printed with '?' for the bad bytes. Thread-safe. */
json_t *zt_pb_to_json(const ProtobufCMessage *msg);

/* The name of an enum value without the enum's type prefix: "QUEUED" for
 * JOB_STATE_QUEUED of zt.v1.JobState; "?" for a value the descriptor does not know.
 * Points into the descriptor (static storage). */
const char *zt_pb_enum_short_name(const ProtobufCEnumDescriptor *type, int value);

#endif
