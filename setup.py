"""Packaging hook only; the metadata lives in setup.cfg.

Ships ``tf_patches_auto.pth`` (the ``TF_PATCHES_AUTO`` switch) at the root of site-packages, where
Python runs ``.pth`` lines at start-up, for regular and editable installs alike.
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH_FILE = os.path.join("tf_patches", "session", "bootstrap", "tf_patches_auto.pth")


class build_py_with_pth(build_py):
    def run(self) -> None:
        super().run()
        # A regular wheel is built from build_lib; an editable one (PEP 660) copies no code and is
        # assembled from the install command's install_lib, so the .pth goes there.
        root = self.get_finalized_command("install").install_lib if self.editable_mode else self.build_lib
        self.copy_file(PTH_FILE, os.path.join(root, os.path.basename(PTH_FILE)), preserve_mode=False)


setup(cmdclass={"build_py": build_py_with_pth})
