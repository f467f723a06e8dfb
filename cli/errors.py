"""One place that turns user mistakes into one message and exit status 2 (DESIGN.md: never a traceback)."""

from __future__ import annotations

import sys


def run_guarded(fn, args) -> int:
    from pydantic import ValidationError

    from advisor.errors import UserError

    try:
        return int(fn(args) or 0)
    except UserError as exc:
        print(f"advise: error: {exc.message()}", file=sys.stderr)
        return getattr(exc, "exit_code", 2)  # 75 for a full disk (advisor.errors.ResourceShortage)
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = ".".join(str(p) for p in e.get("loc", ())) or exc.title
        print(f"advise: error: {loc}: {e.get('msg')} (got {e.get('input')!r})", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("advise: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:  # a full disk anywhere (run directory, submission, logs): transient, not a bug
        import errno

        from advisor.errors import EXIT_TEMPFAIL

        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"advise: error: {where}no space left on the device ({exc.strerror}); this is transient\n"
              "  fix: free space on that disk (df -h) and run it again", file=sys.stderr)
        return EXIT_TEMPFAIL
