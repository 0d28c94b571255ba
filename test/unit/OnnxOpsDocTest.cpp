//===- OnnxOpsDocTest.cpp - the ONNX op reference lists every op ----------===//
//
// docs/reference/onnx-ops.md is written by hand (it says what each op's
// gradient is); this keeps it from falling behind the importer's tables.
//
//===----------------------------------------------------------------------===//

#include "../../compiler/Import/Importer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace {

std::string reference() {
  std::ifstream file(std::string(CDP_SOURCE_DIR) +
                     "/docs/reference/onnx-ops.md");
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

TEST(OnnxOpsDoc, ListsEveryImportedOpWithItsFirstOpset) {
  std::string doc = reference();
  ASSERT_FALSE(doc.empty());
  for (const auto &[op, since] : cdp::import::importedOps())
    EXPECT_NE(doc.find("| `" + op + "` | " + std::to_string(since) + "– |"),
              std::string::npos)
        << op << " (from opset " << since << ") is missing";
}

TEST(OnnxOpsDoc, ListsEveryFoldedOp) {
  std::string doc = reference();
  for (const std::string &op : cdp::import::foldedOps())
    EXPECT_NE(doc.find("| `" + op + "` |"), std::string::npos)
        << op << " is missing";
}

} // namespace
