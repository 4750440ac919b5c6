"""``edgekit serve SOURCE...`` and ``python -m edgekit.run SOURCE --serve``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..clitools import guarded, split_debug


def add_server_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("server (--serve)")
    group.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    group.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    group.add_argument("--max-batch-size", type=int, default=8, help="dynamic batching: largest batch (default 8)")
    group.add_argument("--max-queue-delay-us", type=int, default=500,
                       help="dynamic batching: longest wait for a batch to fill, microseconds (default 500)")
    group.add_argument("--max-queue-size", type=int, default=256,
                       help="requests waiting per model before answering 503 (default 256)")
    group.add_argument("--max-body-mb", type=float, default=64.0, help="largest request body (default 64 MB)")
    group.add_argument("--reports-dir", default=None, help="store benchmark reports POSTed to /v2/reports here")


def options_from(args: argparse.Namespace):
    from .app import ServerOptions

    for name in ("max_batch_size", "max_queue_size"):
        if getattr(args, name) < 1:
            raise SystemExit(f"error: --{name.replace('_', '-')} must be at least 1")
    return ServerOptions(
        max_batch_size=args.max_batch_size, max_queue_delay_us=max(0, args.max_queue_delay_us),
        max_queue_size=args.max_queue_size, max_body_bytes=int(args.max_body_mb * (1 << 20)),
        reports_dir=args.reports_dir, cache_predictions=getattr(args, "cache_predictions", False),
    )


def main(argv: Sequence[str] | None = None, prog: str = "edgekit serve") -> int:
    args_list, debug = split_debug(argv)
    parser = argparse.ArgumentParser(prog=prog, description="Serve packages over KServe v2 (Open Inference Protocol) "
                                     "with dynamic batching and Prometheus metrics.")
    parser.add_argument("sources", nargs="+", help="package directories, .ekpkg files or URLs (one model each)")
    parser.add_argument("--target", dest="profile", default="auto", help="device profile (default: detect)")
    parser.add_argument("--artifact", choices=["tflite", "onnx", "coreml"], default=None)
    parser.add_argument("--backend", choices=["litert", "onnxruntime", "coreml"], default=None)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--cache-predictions", action="store_true", help="answer repeated inputs from a cache")
    parser.add_argument("--require-signature", action="store_true", default=None,
                        help="refuse packages not signed by a key in --trusted-keys")
    parser.add_argument("--trusted-keys", default=None, metavar="DIR", help="folder of trusted KEY.pub files")
    parser.add_argument("--debug", action="store_true")
    add_server_options(parser)
    args = parser.parse_args(args_list)

    def body() -> int:
        from .app import serve

        serve(args.sources, args.host, args.port, options_from(args), args.artifact, args.backend, args.threads,
              args.profile, args.require_signature, args.trusted_keys)
        return 0

    return guarded(body, debug)


if __name__ == "__main__":
    sys.exit(main())
