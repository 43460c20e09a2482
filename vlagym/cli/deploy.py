"""`vlagym export` and `vlagym serve`: a checkpoint's acting path for other runtimes (ONNX), and served over the
openpi websocket protocol."""

from __future__ import annotations

import argparse
from pathlib import Path

from vlagym.cli.common import EXIT_OK, UserError, add_options, build
from vlagym.cli.options import option_values
from vlagym.eval.configs import EvalError, ServeConfig
from vlagym.policies.config import ExportConfig


def cmd_export(args: argparse.Namespace) -> int:
    from vlagym.policies.onnx import ExportError, export_onnx

    cfg = build(ExportConfig, option_values(args, ExportConfig), positional=("checkpoint",))
    out = Path(cfg.out) if cfg.out else Path(cfg.checkpoint) / "model.onnx"
    try:
        report = export_onnx(cfg.checkpoint, out, opset=cfg.opset, check=cfg.check)
    except ExportError as e:
        raise UserError(str(e)) from e
    print(f"wrote {report.path} ({report.bytes / 1e6:.1f} MB, opset {report.opset}) in {report.export_s:.1f} s")
    if report.max_abs_diff is not None:
        print(f"max |onnxruntime - torch| over a chunk of random inputs: {report.max_abs_diff:.2e}")
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        cfg = build(ServeConfig, option_values(args, ServeConfig), positional=("checkpoint",))
        from vlagym.eval.server import PolicyServer

        server = PolicyServer(cfg.checkpoint, cfg.host, cfg.port, cfg.n_action_steps)
    except EvalError as e:
        raise UserError(str(e)) from e
    print(f"serving {cfg.checkpoint} on {server.uri} (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    finally:
        server.stop()
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="a checkpoint's acting path as an ONNX file (observation batch -> action chunk)",
        description="Export a checkpoint's acting path (images, instruction tokens, proprio -> action chunk, "
        "normalisation included) to ONNX, with the checkpoint's config and tokenizer in the file's metadata.",
    )
    add_options(p, ExportConfig, positional=("checkpoint",))
    p.set_defaults(handler=cmd_export)
    p = sub.add_parser(
        "serve",
        help="serve a checkpoint over the openpi websocket protocol (vlagym eval --policy ws://HOST:PORT)",
        description="Serve a checkpoint over the openpi policy-server protocol: each observation message gets the "
        "checkpoint's action chunk. docs/serving.md has the keys.",
    )
    add_options(p, ServeConfig, positional=("checkpoint",))
    p.set_defaults(handler=cmd_serve)
