# -*- Python -*-
# lit configuration for cdp: FileCheck tests of the dialect and importer,
# Python-driven end-to-end tests, and the GoogleTest unit tests.

import os

import lit.formats
from lit.llvm import llvm_config

config.name = "cdp"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "Inputs",
                   "unit"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.cdp_obj_root, "test")

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.cdp_tools_dir, append_path=True)
# Tests that need Python use Debian's interpreter, which has onnx and torch.
config.substitutions.append(("%debian_python", config.python_executable))
config.substitutions.append(("%shared", config.cdp_shared_dir))
config.substitutions.append(("%models", os.path.join(config.test_source_root, "Import", "make_models.py")))
config.substitutions.append(("%srcroot", config.cdp_src_root))
config.substitutions.append(("%cdp_bin", config.cdp_tools_dir))
config.substitutions.append(("%unit_bin", os.path.join(config.cdp_obj_root, "test", "unit")))
config.substitutions.append(("%llvm_include", "/usr/lib/llvm-19/include"))
llvm_config.add_tool_substitutions(["cdp-opt", "cdp-compile", "cdp-run"], [config.cdp_tools_dir])
# PyTorch references that tests compute once and reuse (the plain and the
# sanitized suites make the same ones): test/e2e/reference_cache.py.
config.environment["CDP_REFERENCE_CACHE"] = os.path.join(
    config.cdp_src_root, ".cache", "test-references")

# Tests under mpirun: where the build has the MPI fabric and mpirun is
# there. Open MPI refuses root unless told (CI runs as root), and the
# processes share the machine's cores (--oversubscribe in the tests).
import shutil
if config.cdp_enable_mpi.upper() in ("ON", "1", "TRUE", "YES") and shutil.which("mpirun"):
    config.available_features.add("mpi")
    config.environment["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
    config.environment["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    config.substitutions.append(
        ("%mpirun_sm", "mpirun --oversubscribe --mca btl self,vader "
         "--mca btl_vader_single_copy_mechanism none"))
    config.substitutions.append(
        ("%mpirun", "mpirun --oversubscribe --mca btl self,tcp --mca btl_tcp_if_include lo"))

# The CUDA backend: 'cuda' where the build has it, 'cuda-device' where a GPU
# is visible too (tests of a GPU run carry REQUIRES: cuda-device).
import subprocess
if config.cdp_enable_cuda.upper() in ("ON", "1", "TRUE", "YES"):
    config.available_features.add("cuda")
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                                timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        listed = ""
    if "GPU" in listed:
        config.available_features.add("cuda-device")

# The tools built with ASan + UBSan (scripts/sanitize.sh): 'sanitized'. The
# suites run there too, but three tests whose work is repetition rather than
# new code paths do less (CI's 45 minutes on two cores): recompute-more.test
# (the ResNet, LeNet and most Hugging Face exports; recompute.test keeps
# every strategy on the transformer block and three exports), stop-signal's
# runs (fewer steps) and demo-figures (a Fashion-MNIST epoch that checks the
# guide's numbers, not the code).
if config.cdp_sanitize.upper() in ("ON", "1", "TRUE", "YES"):
    config.available_features.add("sanitized")

# Running as root with setpriv: tests may drop to another user to meet
# limits root ignores (RLIMIT_NPROC: how many threads a process may start).
if hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("setpriv"):
    config.available_features.add("root-setpriv")
