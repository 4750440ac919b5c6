"""``edgekit serve SOURCE...`` and ``python -m edgekit.run SOURCE --serve``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .options import ArgumentParser, HelpFormatter, at_least, bounded, worker_count
from .tools import guarded, split_debug


def _port(text: str) -> int:
    value = _integer(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port (0-65535; 0 picks a free one)")
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def add_server_options(parser: ArgumentParser) -> None:
    group = parser.group("server (--serve)")
    group.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    group.add_argument("--port", type=_port, default=8000, help="port (default 8000; 0 picks a free port)")
    group.add_argument("--grpc-port", type=_port, default=None,
                       help="also serve KServe v2 over gRPC on this port (0 picks a free port)")
    group.add_argument("--workers", type=worker_count, default=1,
                       help="server processes sharing the port, each with its own model session and batcher "
                            "(default 1); JSON decoding scales with them, memory too. --threads is per worker "
                            "(default: the device's threads divided among the workers)")
    group.add_argument("--max-batch-size", type=bounded(1, 4096), default=8,
                       help="dynamic batching: largest batch (default 8)")
    group.add_argument("--max-queue-delay-us", type=at_least(0), default=500,
                       help="dynamic batching: longest wait for a batch to fill, microseconds (default 500)")
    group.add_argument("--max-queue-size", type=at_least(1), default=256,
                       help="requests waiting per model before answering 503 (default 256)")
    group.add_argument("--max-body-mb", type=_positive_float, default=64.0, help="largest request body (default 64 MB)")
    group.add_argument("--max-image-mpixels", type=_positive_float, default=25.0,
                       help="largest image /infer/image decodes, megapixels (default 25)")
    group.add_argument("--reports-dir", default=None, help="store benchmark reports POSTed to /v2/reports here")
    group.add_argument("--allow-failed-artifact", action="store_true",
                       help="serve an artifact that failed its validation gate when it was packaged (refused "
                            "otherwise)")


def require_server_extra() -> None:
    """The server's libraries come from an extra: name it instead of failing on an import."""
    from ..errors import BackendUnavailableError

    missing = []
    for module in ("starlette", "uvicorn", "prometheus_client", "simdjson", "orjson", "grpc"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise BackendUnavailableError(f"the server needs {', '.join(missing)}, which is not installed",
                                      hint="pip install 'edgekit[server]'")


def options_from(args: argparse.Namespace):  # noqa: ANN201 - ServerOptions, imported lazily
    require_server_extra()
    from ..server.dataplane import ServerOptions

    return ServerOptions(
        max_batch_size=args.max_batch_size, max_queue_delay_us=args.max_queue_delay_us,
        max_queue_size=args.max_queue_size, max_body_bytes=int(args.max_body_mb * (1 << 20)),
        reports_dir=args.reports_dir, cache_predictions=getattr(args, "cache_predictions", False),
        max_image_pixels=int(args.max_image_mpixels * 1e6), grpc_port=args.grpc_port, workers=args.workers,
        allow_failed_artifact=args.allow_failed_artifact,
    )


def parser(prog: str = "edgekit serve") -> argparse.ArgumentParser:
    """``edgekit serve``'s options (also what its command reference is generated from)."""
    from .options import add_load_options

    p = ArgumentParser(prog=prog, formatter_class=HelpFormatter,
                       description="Serve packages over KServe v2 (Open Inference Protocol) with dynamic batching and "
                                   "Prometheus metrics.")
    p.add_argument("sources", nargs="+", help="package directories, .ekpkg files or URLs (one model each)")
    add_load_options(p)
    p.add_argument("--cache-predictions", action="store_true", help="answer repeated inputs from a cache")
    add_server_options(p)
    return p


def main(argv: Sequence[str] | None = None, prog: str = "edgekit serve") -> int:
    args_list, debug = split_debug(argv)
    args = parser(prog).parse_args(args_list)

    def body() -> int:
        options = options_from(args)
        from ..server.launch import serve

        serve(args.sources, args.host, args.port, options, args.artifact, args.backend, args.threads,
              args.profile, args.require_signature, args.trusted_keys)
        return 0

    return guarded(body, debug)


if __name__ == "__main__":
    sys.exit(main())
