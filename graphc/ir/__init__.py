"""graphc's IR: the ``Graph`` (a networkx MultiDiGraph with ordered operands per node) and
what reads and checks it.  The lowest layer of graphc: it imports only eager's op
registry, numpy and networkx.

- ``graph.py``: the ``Graph`` data structure (construction, queries, rewriting).
- ``text.py``: one-line forms (``f32[2,3]``, escaped names, a node for an error message).
- ``verify.py``: the invariants every stage keeps.
- ``printer.py``: the text (jaxpr-like) and DOT forms.
- ``serialize.py``: the strict JSON form.

Inside the package the modules import each other directly (text <- verify <- printer,
serialize <- graph), never this ``__init__``.
"""

from .graph import IR_OPS, Graph, iter_nodes
from .printer import to_dot, to_text
from .serialize import to_json
from .text import describe, printable, short_dtype, type_str
from .verify import verify

from_json = Graph.from_json

__all__ = [
    "IR_OPS",
    "Graph",
    "describe",
    "from_json",
    "iter_nodes",
    "printable",
    "short_dtype",
    "to_dot",
    "to_json",
    "to_text",
    "type_str",
    "verify",
]
