"""Where a GGUF file's tensor infos start (after its header and metadata): the CLI tests that edit
a tensor's name or dims in place (check_bad_input.sh, check_quantize.sh) find them with it."""
import struct

# Bytes of GGUF's fixed-size value types: uint8, int8, uint16, int16, uint32, int32, float32, bool,
# uint64, int64, float64 (8 is a string, 9 an array).
_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def _skip_value(data, pos, vtype):
    if vtype in _FIXED:
        return pos + _FIXED[vtype]
    if vtype == 8:
        return pos + 8 + struct.unpack_from("<Q", data, pos)[0]
    etype, count = struct.unpack_from("<IQ", data, pos)
    pos += 12
    for _ in range(count):
        pos = _skip_value(data, pos, etype)
    return pos


def first_tensor_info(data):
    """The offset of the first tensor info: its name's uint64 length, then the name."""
    pos, (_magic, _version, _n_tensors, n_kv) = 24, struct.unpack_from("<4sIQQ", data, 0)
    for _ in range(n_kv):
        pos += 8 + struct.unpack_from("<Q", data, pos)[0]  # the key
        pos = _skip_value(data, pos + 4, struct.unpack_from("<I", data, pos)[0])
    return pos
