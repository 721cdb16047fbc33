"""A policy site's call path with nothing in it but what its tables decide: ``PolicyNorm``'s thresholds written out
as one small Python function per site (made when the site resolves, again on ``.to()``, ``train()``/``eval()``), with
its dtypes, sequence axis, thresholds and implementations as constants, installed as the site's ``forward``.

What ``PolicyNorm.forward`` does with look-ups (a dict keyed by dtype and pass, a loop over a tuple of thresholds),
this function does with ``is`` tests and integer comparisons on constants, and it calls the implementation's
``forward`` itself: a site's ``__call__`` reaches the implementation through this one function. The source is
generated (as ``dataclasses`` writes ``__init__``) because the number of regime boundaries, dtypes and the sequence
axis differ per site; it is kept on the function (``__source__``) and shown in tracebacks.

Every (dtype, pass) of the tables is written out, for an input of the rank the apply-time probe saw; anything else
(another rank, a dtype or pass the policy has no answer for) goes to ``PolicyNorm.forward``, which handles every case
and warns where the original module runs.

The same body is also written out as the site's ``__call__`` (on a class of its own, a subclass of ``PolicyNorm``
named ``PolicyNorm``): ``nn.Module.__call__`` costs two Python frames with ``*args``/``**kwargs`` and its checks, more
than the dispatch itself. That ``__call__`` makes ``nn.Module._call_impl``'s own checks first, on one line (the
module's and the global hooks, a compiled call from ``module.compile()``, ``torch.jit`` tracing), and where any
holds it calls ``nn.Module.__call__``, which then runs the hooks around the lean ``forward``: with no hook a site's
call costs less than a module call of its implementation would. Dynamo traces it as it traces any module's own
``__call__``.
"""

from __future__ import annotations

import inspect
import itertools
import linecache
import math
import re

import torch
from torch import nn
from torch.nn.modules import module as nn_module

_COUNTER = itertools.count(1)   # a unique name per generated source


def _arg_name(module) -> str | None:
    """The name of the original forward's one input (``hidden_states``, ``input``, ``x``); None when its forward
    takes anything but one positional-or-keyword tensor (the lean path then stays off)."""
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return None
    if len(params) != 1 or params[0].kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD:
        return None
    name = params[0].name
    taken = name in {"generic", "grad_enabled", "P", "dt", "s", "sh", "y", "self", "module_call", "tracing", "S",
                     "dynamo", "C"} or re.fullmatch(r"[DIEHM]\d+", name)
    return name if name.isidentifier() and not taken else None


def _direct(impl, original):
    """The callable a branch calls: a backend's ``forward`` as the tables hold it; the original module's own
    ``forward`` (an instance attribute where a library replaced it, as accelerate does) when it has no hooks of its
    own and none are registered globally (its hooks, where there are, keep it called as a module)."""
    if impl is not original:
        return impl
    hooked = any(getattr(original, h) for h in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                                                  "_backward_pre_hooks")) or any(
        getattr(nn_module, h) for h in ("_global_forward_hooks", "_global_forward_pre_hooks",
                                         "_global_backward_hooks", "_global_backward_pre_hooks"))
    return original if hooked else original.forward


def _branch(lines: list, indent: str, entries, n, consts: dict, site, cast: bool) -> None:
    """``if n <= limit: return impl(x)`` per boundary (``n`` an expression; an int known when the site resolves
    picks its entry there), the last (unbounded) entry without a comparison. Gemma's cached ``1 + weight``
    (``_CachedOffset``) is written out in place: outside a compiled graph, the weight's version compared with the
    scale's and the backend's ``forward`` called; inside one, the ``_CachedOffset`` (its per-call scale)."""
    for lim, impl, why in entries:
        if isinstance(n, int) and n > lim:
            continue
        scaled = None
        if why is not None:   # the original module runs, and says why once (PolicyNorm._eager)
            name = f"E{len(consts)}"
            consts[name] = (lambda w: (lambda x: site._eager(w, (x,), {})))(why)
        else:
            name = f"I{len(consts)}"
            consts[name] = _direct(impl, site.original)
            inline = getattr(getattr(impl, "__self__", None), "inline_forward", None)
            scaled = inline() if inline is not None else None
        ret = _ret(f"{name}(x)", cast and why is None)
        last = lim == math.inf or isinstance(n, int)
        if scaled is not None:
            at = indent if last else indent + "    "
            if not last:
                lines.append(f"{indent}if {n} <= {int(lim)}:")
            fwd = f"M{len(consts)}"
            consts[fwd] = scaled
            consts.update(S=site, **_COMPILING)
            lines += [f"{at}if {_IN_GRAPH}: {ret}", f"{at}{_REFRESH}", f"{at}{_ret(fwd + '(x)', cast)}"]
        elif not last:
            lines.append(f"{indent}if {n} <= {int(lim)}: {ret}")
        else:
            lines.append(f"{indent}{ret}")
        if last:
            return
    lines.append(f"{indent}return generic(x)")


def _ret(call: str, cast: bool, dt: str = "dt") -> str:
    """``return call``, its output cast to ``dt`` (the input's dtype) where ``cast`` (the original returns it so)."""
    return f"y = {call}; return y if y.dtype is {dt} else y.to({dt})" if cast else f"return {call}"


#: Gemma's cached ``1 + weight`` made again where the weight changed since (``PolicyNorm._refresh_scales``)
_REFRESH = "if P['weight']._version != S._scale_ver: S._refresh_scales()"
#: ``torch.compiler.is_compiling()`` in one trivial call and an attribute read (it makes two calls: 0.19 against
#: 0.09 µs here): Dynamo reads ``is_dynamo_compiling()`` as True and never reaches the flag (a guard on the flag would
#: recompile every call), which ``torch.export``'s non-Dynamo tracing sets
_IN_GRAPH = "(dynamo() or C._is_compiling_flag)"
_COMPILING = {"dynamo": getattr(torch.compiler, "is_dynamo_compiling", torch.compiler.is_compiling),
              "C": torch.compiler}


#: ``nn.Module._call_impl``'s conditions for more than ``forward`` (hooks, a compiled call, jit tracing), on one line
_GUARD = ("    if (self._forward_hooks or self._forward_pre_hooks or self._backward_hooks or self._backward_pre_hooks"
          " or H0 or H1 or H2 or H3 or self._compiled_call_impl is not None or tracing()):"
          " return module_call(self, x)")


def lean_forward(site):
    """The lean ``forward`` of a resolved ``PolicyNorm`` (a plain function of the site's one input), or None where
    the site has no tables to write out (a policy by exact shape, no probe, a forward taking other arguments). The
    site's ``__call__`` (the same body behind ``nn.Module``'s checks, a function of the site and its input) is kept on
    it as ``__call_fn__``."""
    tables = site.__dict__.get("_tables")
    arg = _arg_name(site.original)
    if not tables or site._ndim < 0 or arg is None:
        return None
    ndim, sax, bfirst, cast = site._ndim, site._sax, site._bfirst, site._cast
    consts = _consts(site)
    # autograd records when grad is enabled and the input or one of the site's parameters (read live) requires it
    params = "".join(f" or (P[{k!r}] is not None and P[{k!r}].requires_grad)" for k in site._parameters)
    # x.shape builds a torch.Size per read: read once
    lines = ["    sh = x.shape",
             f"    if len(sh) != {ndim}: return generic(x)",
             "    dt = x.dtype",
             f"    if grad_enabled() and (x.requires_grad{params}):"]
    for recording in (True, False):
        indent = "        " if recording else "    "
        for (dtype, rec), (dec, pre) in sorted(tables.items(), key=lambda kv: str(kv[0])):
            if rec != recording:
                continue
            name = f"D{len(consts)}"
            consts[name] = dtype
            lines.append(f"{indent}if dt is {name}:")
            lines.append(f"{indent}    s = sh[{sax}]")
            lines.append(f"{indent}    if s == 1:")
            # positions: batch x sequence where the batch leads the sequence axis, else the sequence alone
            _branch(lines, indent + "        ", dec, "sh[0]" if bfirst else 1, consts, site, cast)
            _branch(lines, indent + "    ", pre, "s * sh[0]" if bfirst else "s", consts, site, cast)
        lines.append(f"{indent}return generic(x)")
    return _emit(site, arg, consts, lines)


def lean_pinned(site, impl):
    """``apply_policy(..., pin=...)``'s ``forward``: ``impl`` called (its output cast to the input's dtype where the
    original returns it so), written out as :func:`lean_forward`'s is (None: a forward taking other arguments)."""
    arg = _arg_name(site.original)
    if arg is None:
        return None
    consts = _consts(site)
    consts["I0"] = impl
    cast = site._cast
    inline = getattr(getattr(impl, "__self__", None), "inline_forward", None)
    scaled = inline() if inline is not None else None
    if scaled is None:
        return _emit(site, arg, consts, [f"    {_ret('I0(x)', cast, 'x.dtype')}"])
    # Gemma's 1 + weight (_PinnedOffset): per call while autograd records or in a graph, else cached and checked
    consts.update(M0=scaled, S=site, **_COMPILING)
    return _emit(site, arg, consts, [
        f"    if (grad_enabled() and P['weight'].requires_grad) or {_IN_GRAPH}: {_ret('I0(x)', cast, 'x.dtype')}",
        f"    {_REFRESH}", f"    {_ret('M0(x)', cast, 'x.dtype')}"])


def _consts(site) -> dict:
    return {"generic": type(site).forward.__get__(site), "grad_enabled": torch.is_grad_enabled,
            "P": site._parameters, "module_call": nn.Module.__call__, "tracing": torch._C._get_tracing_state,
            "H0": nn_module._global_forward_hooks, "H1": nn_module._global_forward_pre_hooks,
            "H2": nn_module._global_backward_hooks, "H3": nn_module._global_backward_pre_hooks}


def _emit(site, arg: str, consts: dict, lines: list):
    """``forward(x)`` and ``__call__(self, x)`` (the same body behind :data:`_GUARD`) compiled from ``lines``."""
    body = "\n".join(lines) + "\n"
    text = "def forward(x):\n" + body + "\n\ndef __call__(self, x):\n" + _GUARD + "\n" + body
    # the input under the original's own name (``hidden_states``, ``input``): a keyword call works as it did
    source = re.sub(r"\bx\b", arg, text)
    filename = f"<normbench policy site {site.label} #{next(_COUNTER)}>"
    linecache.cache.pop(site.__dict__.get("_lean_file"), None)   # this site's previous source (re-resolved)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    site.__dict__["_lean_file"] = filename
    scope: dict = {}
    exec(compile(source, filename, "exec"), dict(consts), scope)
    fn, call = scope["forward"], scope["__call__"]
    fn.__source__ = call.__source__ = source
    fn.__qualname__ = f"PolicyNorm[{site.label}].forward"
    call.__qualname__ = f"PolicyNorm[{site.label}].__call__"
    fn.__call_fn__ = call
    return fn
