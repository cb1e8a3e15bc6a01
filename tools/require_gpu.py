"""Exit with a clear message unless PyTorch sees a CUDA GPU. `make test-gpu` runs this
first.

Without it the GPU suite on a CPU machine would only skip tests and look green.
Usage: python tools/require_gpu.py
"""

import sys

import torch


def main() -> int:
    if not torch.cuda.is_available():
        print(
            "make test-gpu: FAILED, no CUDA GPU: torch.cuda.is_available() is False "
            f"(torch {torch.__version__}, built for CUDA "
            f"{torch.version.cuda or 'none'}). The GPU suite needs a machine with an "
            "NVIDIA GPU and a CUDA build of torch; `make test` is the CPU suite.",
            file=sys.stderr,
        )
        return 3
    names = ", ".join(
        torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())
    )
    print(
        f"make test-gpu: CUDA {torch.version.cuda}, torch {torch.__version__}, {names}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
