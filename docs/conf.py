# Sphinx configuration of the documentation site (`make docs`; tools/docs.sh builds it and
# checks it). The pages are the Markdown files of this folder (MyST), the Python API comes from
# the package's docstrings (autodoc, importing python/dlcache with the library the build made),
# and the C API from the public headers through Doxygen's XML (Breathe). Everything here comes
# from Debian's packages: python3-sphinx, python3-myst-parser, python3-breathe, doxygen.
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))

project = "dlcache"
author = "the dlcache engineers"
copyright = "the dlcache engineers"

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "breathe"]
source_suffix = {".md": "markdown"}
root_doc = "index"
# The Doxyfile and the SVG sources of plots are not pages; the build writes outside this folder.
exclude_patterns = ["_build", "Doxyfile"]

myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

# tools/docs.sh runs Doxygen into build-docs/xml first (DLCACHE_DOXYGEN_XML overrides).
breathe_projects = {
    "dlcache": os.environ.get("DLCACHE_DOXYGEN_XML", os.path.join(ROOT, "build-docs", "xml"))
}
breathe_default_project = "dlcache"
breathe_domain_by_extension = {"h": "c"}

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
# torch is imported lazily by the package; the site is built without importing it.
autodoc_mock_imports = []

html_theme = "alabaster"
html_title = "dlcache"
html_static_path = []
html_theme_options = {"description": "pre-decoded caches that keep GPUs fed", "fixed_sidebar": True}


def setup(app):
    # Breathe renders a header's `typedef struct dlc_x {...} dlc_x;` twice, as the struct and as
    # the typedef's target, and Sphinx's C domain then says "Duplicate C declaration ...
    # Declaration is '.. c:struct:: dlc_x'" (or c:enum, or the typedef's "c:type:: enum dlc_x
    # dlc_x") for every such type. The
    # warning has no type Sphinx could suppress; drop exactly that message, so -W keeps every
    # other warning an error.
    import logging
    import re

    class _TypedefTwice(logging.Filter):
        def filter(self, record):
            msg = record.getMessage()
            if not msg.startswith("Duplicate C declaration"):
                return True
            m = re.search(r"Declaration is '\.\. c:(\w+):: (.*)'", msg)
            if not m:
                return True
            kind, decl = m.groups()
            if kind in ("struct", "enum", "union"):
                return False
            # The typedef itself: "c:type:: enum dlc_x dlc_x".
            t = decl.split()
            return not (kind == "type" and len(t) == 3 and t[0] in ("struct", "enum", "union")
                        and t[1] == t[2])

    logging.getLogger("sphinx.sphinx.domains.c").addFilter(_TypedefTwice())
