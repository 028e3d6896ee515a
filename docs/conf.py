"""Sphinx configuration of the terascale documentation (``make docs``)."""

from __future__ import annotations

import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "src"))

import terascale  # noqa: E402

project = "terascale"
author = "the terascale authors"
copyright = "the terascale authors, Apache-2.0"
release = terascale.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "sphinx.ext.intersphinx",
    "sphinxarg.ext",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
root_doc = "index"

myst_enable_extensions = ["colon_fence", "deflist", "fieldlist"]
# no typographic quotes and dashes: the help texts and docstrings name flags in prose
# (``--epochs``), which smart quotes would turn into an en dash
smartquotes = False
myst_heading_anchors = 3

autodoc_typehints = "description"
autodoc_typehints_description_target = "all"
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_class_signature = "mixed"  # the constructor's parameters under the class
autodoc_preserve_defaults = True
autosummary_generate = False

# Docstrings document parameters in numpy style (a ``Parameters`` section); napoleon turns
# each entry into a field that autodoc merges with the parameter's type hint.
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_param = True
napoleon_use_rtype = False

intersphinx_mapping = {
    "python": ("https://docs.python.org/3", None),
}
intersphinx_disabled_reftypes = ["*"]
# the build machine has no network: intersphinx is off unless a mapping file is at hand
intersphinx_mapping = {}


html_theme = "furo"
html_title = f"terascale {release}"
html_static_path = []

# A class re-exported by its package (terascale.transport.Exchange is
# terascale.transport.base.Exchange) has two names; a type hint naming it finds both.
suppress_warnings = ["ref.python"]


def _field_dashes(app, doctree, docname):
    """The separator Sphinx puts between a parameter's name and its description (" -- ")
    as the dash smart quotes would have made of it."""
    from docutils import nodes

    for text in list(doctree.findall(nodes.Text)):
        if str(text) == " -- ":
            text.parent.replace(text, nodes.Text(" \u2013 "))


def setup(app):
    app.connect("doctree-resolved", _field_dashes)
