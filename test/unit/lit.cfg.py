# -*- Python -*-
# The GoogleTest unit tests, one lit test per test case.
import os
import lit.formats

config.name = "cdp-unit"
config.test_format = lit.formats.GoogleTest(".", "Tests")
config.test_source_root = os.path.join(config.cdp_obj_root, "test", "unit")
config.test_exec_root = config.test_source_root
