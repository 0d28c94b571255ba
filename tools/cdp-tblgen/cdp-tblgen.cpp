//===- cdp-tblgen.cpp - the MLIR-free op table, generated from ODS --------===//
//
// `-gen-op-table` writes, for every op of the graph dialect, what the
// runtime needs to know of it without MLIR: its arity (inputs and results,
// optional and variadic ones counted), its attributes with their kinds and
// defaults, and a struct per op with attributes that reads them from a
// plan instruction (any reader with i, f, s, ints and floats, as the
// kernels' KernelArgs). The CPU and the CUDA kernels and the runtime's
// signatures read this one definition instead of spelling names and
// defaults each.
//
//===----------------------------------------------------------------------===//

#include "mlir/TableGen/Argument.h"
#include "mlir/TableGen/Attribute.h"
#include "mlir/TableGen/Operator.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/TableGen/Main.h"
#include "llvm/TableGen/Record.h"

using namespace llvm;
using mlir::tblgen::Attribute;
using mlir::tblgen::NamedAttribute;
using mlir::tblgen::Operator;

namespace {

cl::opt<bool> genOpTable("gen-op-table",
                         cl::desc("Generate the MLIR-free op table"));
cl::opt<std::string> dialectName("dialect", cl::desc("the dialect's name"),
                                 cl::init("cdp"));

/// How the plan holds an attribute, and how a struct field reads it.
struct AttrKind {
  const char *kind;     ///< the table's AttrKind enumerator
  const char *type;     ///< the struct field's C++ type (nullptr: no field)
  const char *read;     ///< the reader's method
  const char *fallback; ///< the value of a required attribute when absent
};

AttrKind kindOf(const Attribute &attr) {
  StringRef base = attr.getBaseAttr().getAttrDefName();
  if (base == "BoolAttr")
    return {"Bool", "bool", "i", "false"};
  if (base == "I64Attr")
    return {"Int", "int64_t", "i", "0"};
  if (base == "F32Attr")
    return {"Real", "double", "f", "0.0"};
  if (base == "StrAttr")
    return {"Text", "std::string", "s", "\"\""};
  if (base == "DenseI64ArrayAttr")
    return {"Ints", "std::vector<int64_t>", "ints", ""};
  if (base == "DenseF32ArrayAttr")
    return {"Reals", "std::vector<double>", "floats", ""};
  if (base == "TypeAttr")
    return {"Type", nullptr, nullptr, nullptr};
  if (base == "UnitAttr")
    return {"Unit", nullptr, nullptr, nullptr};
  return {"Tensor", nullptr, nullptr, nullptr};
}

/// An ODS default as a C++ value of the field's type: F32 defaults are
/// written as doubles ("1e-5f" reads 1e-5), as the kernels read them.
std::string defaultOf(const Attribute &attr, const AttrKind &kind) {
  if (!attr.hasDefaultValue())
    return kind.fallback;
  std::string value = attr.getDefaultValue().str();
  if (StringRef(kind.kind) == "Real" && StringRef(value).ends_with("f"))
    value.pop_back();
  if (StringRef(kind.kind) == "Reals" && value == "{}")
    return "";
  return value;
}

/// "max_pool_grad" -> "MaxPoolGrad".
std::string camel(StringRef mnemonic) {
  std::string out;
  for (StringRef part : llvm::split(mnemonic, '_'))
    out += (Twine(toUpper(part.front())) + part.drop_front()).str();
  return out;
}

bool isDialectOp(const Operator &op) {
  return op.getDialectName() == dialectName;
}

std::string mnemonicOf(const Operator &op) {
  return StringRef(op.getOperationName()).split('.').second.str();
}

/// The least and most values of a list of operands or results: an optional
/// one counts in the most only, a variadic one lifts the bound (-1).
std::pair<int, int> countRange(Operator::const_value_range values) {
  int least = 0, most = 0;
  for (const mlir::tblgen::NamedTypeConstraint &value : values) {
    least += !value.isVariableLength();
    most = value.isVariadic() || most < 0 ? -1 : most + 1;
  }
  return {least, most};
}

/// CDP_OP(Name, "mnemonic", minInputs, maxInputs, minResults, maxResults):
/// -1 for no bound (variadic).
void emitArity(const Operator &op, raw_ostream &os) {
  auto [least, most] = countRange(op.getOperands());
  auto [leastOut, mostOut] = countRange(op.getResults());
  os << formatv("CDP_OP({0}, \"{1}\", {2}, {3}, {4}, {5})\n",
                camel(mnemonicOf(op)), mnemonicOf(op), least, most, leastOut,
                mostOut);
}

/// CDP_OP_ATTRIBUTE("mnemonic", "attr", Kind, required)
void emitAttributes(const Operator &op, raw_ostream &os) {
  for (const NamedAttribute &named : op.getAttributes()) {
    if (named.attr.isDerivedAttr())
      continue;
    bool required = !named.attr.isOptional() && !named.attr.hasDefaultValue();
    os << formatv("CDP_OP_ATTRIBUTE(\"{0}\", \"{1}\", {2}, {3})\n",
                  mnemonicOf(op), named.name, kindOf(named.attr).kind,
                  required ? "true" : "false");
  }
}

/// struct <Name>Attributes { fields with ODS defaults; read(reader) }.
void emitStruct(const Operator &op, raw_ostream &os) {
  std::string fields, reads;
  for (const NamedAttribute &named : op.getAttributes()) {
    AttrKind kind = kindOf(named.attr);
    if (named.attr.isDerivedAttr() || !kind.type)
      continue;
    bool list =
        StringRef(kind.read) == "ints" || StringRef(kind.read) == "floats";
    if (named.attr.isOptional() && !list) {
      // An optional scalar: absent is not a value (clip's bounds).
      fields += formatv("  std::optional<{0}> {1};\n", kind.type, named.name);
      reads += formatv("    if (r.find(\"{0}\"))\n      a.{0} = r.{1}(\"{0}\", "
                       "{2});\n",
                       named.name, kind.read, kind.fallback);
      continue;
    }
    std::string value = defaultOf(named.attr, kind);
    fields += formatv("  {0} {1}{2};\n", kind.type, named.name,
                      value.empty() ? "" : " = " + value)
                  .str();
    // Lists read empty when absent; scalars keep the default.
    reads += formatv(list ? "    a.{0} = r.{1}(\"{0}\");\n"
                          : "    a.{0} = r.{1}(\"{0}\", a.{0});\n",
                     named.name, kind.read)
                 .str();
  }
  if (fields.empty())
    return;
  os << formatv("/// {0}'s attributes, defaults from its ODS.\n"
                "struct {1}Attributes {{\n{2}"
                "  template <typename Reader>\n"
                "  static {1}Attributes read(const Reader &r) {{\n"
                "    {1}Attributes a;\n{3}    return a;\n  }\n};\n\n",
                op.getOperationName(), camel(mnemonicOf(op)), fields, reads);
}

bool emitOpTable(raw_ostream &os, RecordKeeper &records) {
  std::vector<Operator> ops;
  for (Record *def : records.getAllDerivedDefinitions("Op"))
    if (Operator op(def); isDialectOp(op))
      ops.push_back(op);
  os << "// Generated by cdp-tblgen -gen-op-table from the graph dialect's "
        "ODS; do not edit.\n\n#ifdef CDP_OP\n";
  for (const Operator &op : ops)
    emitArity(op, os);
  os << "#undef CDP_OP\n#endif\n\n#ifdef CDP_OP_ATTRIBUTE\n";
  for (const Operator &op : ops)
    emitAttributes(op, os);
  os << "#undef CDP_OP_ATTRIBUTE\n#endif\n\n#ifdef CDP_OP_STRUCTS\n";
  for (const Operator &op : ops)
    emitStruct(op, os);
  os << "#undef CDP_OP_STRUCTS\n#endif\n";
  return false;
}

} // namespace

int main(int argc, char **argv) {
  cl::ParseCommandLineOptions(argc, argv);
  if (!genOpTable) {
    errs() << "cdp-tblgen: give -gen-op-table\n";
    return 1;
  }
  return TableGenMain(argv[0], [](raw_ostream &os, RecordKeeper &records) {
    return emitOpTable(os, records);
  });
}
