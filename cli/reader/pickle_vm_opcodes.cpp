// Opcode bytes by name: the names Vm's messages give them (pickletools' names) and the opcodes a
// pickle this VM accepts can start with.
#include <cstdio>

#include "cli/reader/pickle_vm.hpp"
#include "format/pickle_opcodes.hpp"

namespace memtrace::reader::pickle {

namespace {

const char* op_name(uint8_t code) {
  namespace op = format::op;
  switch (code) {
    case op::kMark: return "MARK";
    case op::kStop: return "STOP";
    case op::kPop: return "POP";
    case op::kPopMark: return "POP_MARK";
    case op::kDup: return "DUP";
    case op::kFloat: return "FLOAT";
    case op::kInt: return "INT";
    case op::kBinInt: return "BININT";
    case op::kBinInt1: return "BININT1";
    case op::kLong: return "LONG";
    case op::kBinInt2: return "BININT2";
    case op::kNone: return "NONE";
    case op::kPersId: return "PERSID";
    case op::kBinPersId: return "BINPERSID";
    case op::kReduce: return "REDUCE";
    case op::kString: return "STRING";
    case op::kBinString: return "BINSTRING";
    case op::kShortBinString: return "SHORT_BINSTRING";
    case op::kUnicode: return "UNICODE";
    case op::kBinUnicode: return "BINUNICODE";
    case op::kAppend: return "APPEND";
    case op::kBuild: return "BUILD";
    case op::kGlobal: return "GLOBAL";
    case op::kDict: return "DICT";
    case op::kEmptyDict: return "EMPTY_DICT";
    case op::kAppends: return "APPENDS";
    case op::kGet: return "GET";
    case op::kBinGet: return "BINGET";
    case op::kInst: return "INST";
    case op::kLongBinGet: return "LONG_BINGET";
    case op::kList: return "LIST";
    case op::kEmptyList: return "EMPTY_LIST";
    case op::kObj: return "OBJ";
    case op::kPut: return "PUT";
    case op::kBinPut: return "BINPUT";
    case op::kLongBinPut: return "LONG_BINPUT";
    case op::kSetItem: return "SETITEM";
    case op::kTuple: return "TUPLE";
    case op::kEmptyTuple: return "EMPTY_TUPLE";
    case op::kSetItems: return "SETITEMS";
    case op::kBinFloat: return "BINFLOAT";
    case op::kBinBytes: return "BINBYTES";
    case op::kShortBinBytes: return "SHORT_BINBYTES";
    case op::kProto: return "PROTO";
    case op::kNewObj: return "NEWOBJ";
    case op::kExt1: return "EXT1";
    case op::kExt2: return "EXT2";
    case op::kExt4: return "EXT4";
    case op::kTuple1: return "TUPLE1";
    case op::kTuple2: return "TUPLE2";
    case op::kTuple3: return "TUPLE3";
    case op::kNewTrue: return "NEWTRUE";
    case op::kNewFalse: return "NEWFALSE";
    case op::kLong1: return "LONG1";
    case op::kLong4: return "LONG4";
    case op::kShortBinUnicode: return "SHORT_BINUNICODE";
    case op::kBinUnicode8: return "BINUNICODE8";
    case op::kBinBytes8: return "BINBYTES8";
    case op::kEmptySet: return "EMPTY_SET";
    case op::kAddItems: return "ADDITEMS";
    case op::kFrozenSet: return "FROZENSET";
    case op::kNewObjEx: return "NEWOBJ_EX";
    case op::kStackGlobal: return "STACK_GLOBAL";
    case op::kMemoize: return "MEMOIZE";
    case op::kFrame: return "FRAME";
    case op::kByteArray8: return "BYTEARRAY8";
    case op::kNextBuffer: return "NEXT_BUFFER";
    case op::kReadonlyBuffer: return "READONLY_BUFFER";
    default: return nullptr;
  }
}

}  // namespace

bool may_start_pickle(uint8_t code) {
  namespace op = format::op;
  switch (code) {
    case op::kProto:
    case op::kFrame:
    case op::kMark:
    case op::kEmptyDict:
    case op::kEmptyList:
    case op::kEmptyTuple:
    case op::kEmptySet:
    case op::kNone:
    case op::kNewTrue:
    case op::kNewFalse:
    // numbers
    case op::kFloat:
    case op::kBinFloat:
    case op::kInt:
    case op::kBinInt:
    case op::kBinInt1:
    case op::kLong:
    case op::kBinInt2:
    case op::kLong1:
    case op::kLong4:
    // strings
    case op::kString:
    case op::kBinString:
    case op::kShortBinString:
    case op::kUnicode:
    case op::kBinUnicode:
    case op::kShortBinUnicode:
    case op::kBinUnicode8:
    // bytes
    case op::kBinBytes:
    case op::kShortBinBytes:
    case op::kBinBytes8:
    case op::kByteArray8:
    case op::kGlobal:  // _codecs.encode, builtins.bytes, ...
      return true;
    default:
      return false;
  }
}

std::string describe_opcode(uint8_t op) {
  char buf[48];
  if (const char* nm = op_name(op))
    std::snprintf(buf, sizeof(buf), "%s (0x%02x)", nm, op);
  else
    std::snprintf(buf, sizeof(buf), "0x%02x", op);
  return buf;
}

}  // namespace memtrace::reader::pickle
