"""``graphc export FILE.py:FUNCTION --args SPEC -o model.onnx``: write what graphc
compiles for the inputs as an ONNX model (graphc.export_onnx, docs/onnx.md)."""

from __future__ import annotations

import argparse
import sys

from .common import UsageError


def cmd_export(ns: argparse.Namespace, load_function, resolve_inputs, _failed) -> int:
    """Export FUNCTION for the inputs; one summary line on stdout.  The loaders are the
    CLI package's (passed in: this module does not import its package back)."""
    from ...onnx import export_onnx

    module, fn, name = load_function(ns.target)
    args = resolve_inputs(ns, module, name, fn)
    try:
        model = export_onnx(fn, *args, path=ns.output, opset=ns.opset)
    except ImportError as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        raise UsageError(f"cannot write {ns.output}: {e.strerror or e}") from None
    except Exception as e:  # the function cannot be traced or an op has no ONNX form
        raise _failed(name, e, module) from None
    g = model.graph
    print(
        f"wrote {ns.output}: {len(g.node)} ONNX nodes (opset {model.opset_import[0].version}); "
        f"inputs {', '.join(i.name for i in g.input)}; "
        f"outputs {', '.join(o.name for o in g.output)}",
        file=sys.stdout,
    )
    return 0


def add_parser(sub, add_input_options, epilog: str, loaders: tuple) -> None:
    """Register ``graphc export`` on the subcommand parsers ``sub``; ``loaders`` are the
    CLI's (load_function, resolve_inputs, failed)."""
    e = sub.add_parser(
        "export",
        help="export a function as an ONNX model",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Compile FUNCTION from FILE.py for the given inputs and write the "
        "optimized graph as an ONNX model (needs the 'onnx' extra: pip install "
        "'eager-graphc[onnx]'). A training step exports with its updated parameters as "
        "outputs.",
        epilog=epilog,
    )
    add_input_options(e)
    e.add_argument("-o", "--output", required=True, metavar="FILE", help="the .onnx to write")
    e.add_argument("--opset", type=int, default=None, help="ONNX opset (default 18)")
    e.set_defaults(func=lambda ns: cmd_export(ns, *loaders))
