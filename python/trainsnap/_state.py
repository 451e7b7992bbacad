"""State adapters: Python objects as trainsnap TensorStateful entries.

Each adapter has save() -> (type, bytes, {name: Tensor}) and
load(type, bytes, {name: Tensor}); the C++ core stores the tensors like model
tensors (chunked, deduplicated, compressed) and the bytes in the manifest.
The bytes are JSON (never pickle: restoring a snapshot runs no stored code)
of the object's state_dict() with every tensor replaced by a reference to
its name. load() validates everything before it changes the object.
"""

import json
import math
import random

import torch

from . import _trainsnap

_FORMAT = 1


def type_name(obj):
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _join(path, key):
    """Tensor names are their paths in the state tree: "state/fc.weight/exp_avg"."""
    return f"{path}/{key}" if path else str(key)


class _Encoder:
    """Turns a state tree into JSON-able values; tensors go to self.tensors.

    Tuples, dicts with non-string keys, non-finite floats and tensors are
    tagged so that decode() gives back an equal tree (same types).

    A callable (a function, bound method, lambda or weakref.WeakMethod, such
    as OneCycleLR's `anneal_func` or CyclicLR's scale function) belongs to
    the object that holds it, as load_state_dict treats LambdaLR's lambdas:
    it is recorded by type only, and a load keeps the target's own callable
    at the same place. With `plain` (an extra that is a plain value) there
    is no target object: a callable is refused like any other type.
    `refuse` is the error class for a value that cannot be stored."""

    def __init__(self, plain=False, refuse=None):
        self.tensors = {}
        self.plain = plain
        self.refuse = refuse or _trainsnap.NotSupported

    def encode(self, value, path):
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float):
            if math.isfinite(value):
                return float(value)
            return {"__float__": repr(float(value))}
        if isinstance(value, torch.Tensor):
            if value.is_sparse or value.layout != torch.strided:
                raise self.refuse(f"`{path}` is a {value.layout} tensor")
            name = path
            while name in self.tensors:
                name += "'"
            self.tensors[name] = value.detach()
            return {"__tensor__": name}
        if isinstance(value, tuple):
            return {"__tuple__": [self.encode(v, _join(path, i)) for i, v in enumerate(value)]}
        if isinstance(value, list):
            return [self.encode(v, _join(path, i)) for i, v in enumerate(value)]
        if isinstance(value, dict):
            if all(type(k) is str for k in value):
                return {"__dict__": {k: self.encode(v, _join(path, k)) for k, v in value.items()}}
            items = []
            for k, v in value.items():
                if not isinstance(k, (str, int)) or isinstance(k, bool):
                    raise self.refuse(f"`{path}` has a key of type {type(k).__name__}")
                items.append([k, self.encode(v, _join(path, k))])
            return {"__items__": items}
        if callable(value) and not self.plain:
            return {"__callable__": type_name(value)}
        what = "plain values" if self.plain else "state_dict() values"
        raise self.refuse(
            f"`{path}` is a {type_name(value)}, which trainsnap cannot store "
            f"({what}: tensors, numbers, strings, None, and lists/tuples/dicts of them)")


_NO_LIVE = object()


def _live_at(live, key):
    """The part of the target's current state at `key` (a dict key or a list
    position), or _NO_LIVE."""
    if isinstance(live, dict):
        return live.get(key, _NO_LIVE)
    if isinstance(live, (list, tuple)) and isinstance(key, int) and 0 <= key < len(live):
        return live[key]
    return _NO_LIVE


def _decode(value, tensors, path="", live=_NO_LIVE):
    """The stored tree back, with the tensors given by name. A callable's
    place takes the target's own callable from `live` (the target's current
    state_dict(), walked along): ContractMismatch when it holds none there."""
    if isinstance(value, list):
        return [_decode(v, tensors, _join(path, i), _live_at(live, i)) for i, v in enumerate(value)]
    if isinstance(value, dict):
        if "__tensor__" in value:
            return tensors[value["__tensor__"]]
        if "__tuple__" in value:
            items = value["__tuple__"]
            return tuple(_decode(v, tensors, _join(path, i), _live_at(live, i)) for i, v in enumerate(items))
        if "__float__" in value:
            return float(value["__float__"])
        if "__callable__" in value:
            if live is _NO_LIVE or not callable(live):
                raise _trainsnap.ContractMismatch(
                    f"`{path}` holds a {value['__callable__']} in the snapshot; the target has no callable there "
                    "(callables are the target's own: construct it as the captured object was)")
            return live
        if "__dict__" in value:
            return {k: _decode(v, tensors, _join(path, k), _live_at(live, k)) for k, v in value["__dict__"].items()}
        if "__items__" in value:
            return {k: _decode(v, tensors, _join(path, k), _live_at(live, k)) for k, v in value["__items__"]}
        raise _trainsnap.Corruption(f"unknown tagged value {sorted(value)}")
    return value


def _dump(state, tensors, encoder=None):
    encoder = encoder or _Encoder()
    tree = encoder.encode(state, "")
    tensors.update(encoder.tensors)
    return json.dumps({"format": _FORMAT, "state": tree}, allow_nan=False, separators=(",", ":")).encode()


def _load(payload, tensors, live=_NO_LIVE):
    try:
        doc = json.loads(payload.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _trainsnap.Corruption(f"stored state does not parse: {e}") from None
    if doc.get("format") != _FORMAT:
        raise _trainsnap.NotSupported(f"stored state format {doc.get('format')!r}, this build reads {_FORMAT}")
    names = set()

    def collect(v):
        if isinstance(v, list):
            for x in v:
                collect(x)
        elif isinstance(v, dict):
            if "__tensor__" in v:
                names.add(v["__tensor__"])
            for x in v.values():
                collect(x)

    collect(doc["state"])
    if names != set(tensors):
        raise _trainsnap.Corruption(f"stored tensors {sorted(tensors)} do not match its state {sorted(names)}")
    return _decode(doc["state"], tensors, "", live)


def _check_type(stored, obj):
    actual = type_name(obj)
    if stored != actual:
        raise _trainsnap.ContractMismatch(f"the snapshot holds a {stored}, the target is a {actual}")


class StatefulAdapter:
    """Any object with state_dict()/load_state_dict() (an LR scheduler, a
    data-loader cursor, a trainsnap.ResumableSampler): the protocol of
    PyTorch DCP's Stateful."""

    def __init__(self, kind, obj):
        self.kind = kind
        self.obj = obj
        for method in ("state_dict", "load_state_dict"):
            if not callable(getattr(obj, method, None)):
                raise _trainsnap.InvalidArgument(f"{kind}: a {type_name(obj)} has no {method}()")

    def save(self):
        tensors = {}
        payload = _dump(self.obj.state_dict(), tensors)
        return type_name(self.obj), payload, tensors

    def load(self, stored_type, payload, tensors):
        _check_type(stored_type, self.obj)
        # Callables stay the target's own: found in its current state.
        live = self.obj.state_dict() if b'"__callable__"' in payload else _NO_LIVE
        self.obj.load_state_dict(_load(payload, tensors, live))


PLAIN_TYPE = "trainsnap.plain"


class PlainValueAdapter:
    """An extra that is a plain value (`extra={"epoch": 7}`): numbers,
    strings, bools, None, lists, tuples, dicts of them, and tensors. A load
    updates the dict the caller passed: a dict or list value in place (its
    contents replaced, so that other references to it see them), any other
    value by replacing `extra[key]` (tensors are fresh copies)."""

    def __init__(self, extra, key):
        self.extra = extra
        self.key = key

    def save(self):
        tensors = {}
        encoder = _Encoder(plain=True, refuse=_trainsnap.InvalidArgument)
        payload = _dump(self.extra[self.key], tensors, encoder)
        return PLAIN_TYPE, payload, tensors

    def load(self, stored_type, payload, tensors):
        if stored_type != PLAIN_TYPE:
            raise _trainsnap.ContractMismatch(f"the snapshot holds a {stored_type}, the target is a plain value")
        value = _load(payload, {name: t.clone() for name, t in tensors.items()})
        live = self.extra.get(self.key)
        if type(live) is dict and type(value) is dict:
            live.clear()
            live.update(value)
        elif type(live) is list and type(value) is list:
            live[:] = value
        else:
            self.extra[self.key] = value


def _is_zero(optimizer):
    try:
        from torch.distributed.optim import ZeroRedundancyOptimizer
    except ImportError:  # torch built without distributed
        return False
    return isinstance(optimizer, ZeroRedundancyOptimizer)


class OptimizerAdapter:
    """A torch.optim.Optimizer through its state_dict(), keyed by parameter
    name: the per-parameter state under "<param name>", each param group's
    parameters as names. `names` maps id(tensor) to the parameter's name.

    A ZeroRedundancyOptimizer holds this rank's shard in its local optimizer
    (`.optim`): that is what is saved and loaded (its state_dict() would be a
    collective), and the options of the ZeRO optimizer's own groups (which a
    scheduler sets, and step() copies to the local ones) besides."""

    def __init__(self, kind, optimizer, names, restore_options=True):
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise _trainsnap.InvalidArgument(f"{kind}: a {type_name(optimizer)} is not a torch.optim.Optimizer")
        self.kind = kind
        self.optimizer = optimizer
        self.zero = _is_zero(optimizer)
        self.local = optimizer.optim if self.zero else optimizer
        self.names = names
        self.restore_options = restore_options  # False: the groups keep the target's lr, betas, ...

    def _type(self):
        if self.zero:
            return f"{type_name(self.optimizer)}[{type_name(self.local)}]"
        return type_name(self.optimizer)

    def _group_names(self):
        groups = []
        for g, group in enumerate(self.local.param_groups):
            names = []
            for p in group["params"]:
                name = self.names.get(id(p))
                if name is None:
                    raise _trainsnap.InvalidArgument(
                        f"param group {g} holds a tensor {tuple(p.shape)} that is no parameter of the model")
                names.append(name)
            groups.append(names)
        return groups

    def save(self):
        groups = self._group_names()
        order = [name for names in groups for name in names]
        sd = self.local.state_dict()  # state keyed by index in `order`
        state = {order[index]: value for index, value in sd["state"].items()}
        param_groups = []
        for names, group in zip(groups, sd["param_groups"]):
            group = dict(group)
            group["params"] = names
            param_groups.append(group)
        saved = {"state": state, "param_groups": param_groups}
        if self.zero:
            saved["zero_param_groups"] = [{k: v for k, v in g.items() if k != "params"}
                                          for g in self.optimizer.param_groups]
        tensors = {}
        payload = _dump(saved, tensors)
        return self._type(), payload, tensors

    def load(self, stored_type, payload, tensors):
        if stored_type != self._type():
            raise _trainsnap.ContractMismatch(f"the snapshot holds a {stored_type}, the target is a {self._type()}")
        stored = _load(payload, tensors)
        groups = self._group_names()
        stored_groups = stored["param_groups"]
        if len(stored_groups) != len(groups):
            raise _trainsnap.ContractMismatch(
                f"{len(stored_groups)} param groups in the snapshot, {len(groups)} in the target")
        for g, (saved, names) in enumerate(zip(stored_groups, groups)):
            if saved["params"] != names:
                for i in range(max(len(saved["params"]), len(names))):
                    a = saved["params"][i] if i < len(saved["params"]) else "(none)"
                    b = names[i] if i < len(names) else "(none)"
                    if a != b:
                        raise _trainsnap.ContractMismatch(
                            f"param group {g}, parameter {i}: `{a}` in the snapshot, `{b}` in the target")
        index = {name: i for i, name in enumerate(n for names in groups for n in names)}
        unknown = [name for name in stored["state"] if name not in index]
        if unknown:
            raise _trainsnap.ContractMismatch(f"state of `{unknown[0]}`, which no param group holds")
        zero_groups = stored.get("zero_param_groups") if self.zero else None
        if self.zero and (zero_groups is None or len(zero_groups) != len(self.optimizer.param_groups)):
            raise _trainsnap.Corruption("a ZeroRedundancyOptimizer's state without the options of each of its groups")
        param_groups = []
        for saved, live in zip(stored_groups, self.local.param_groups):
            group = dict(saved) if self.restore_options else {k: v for k, v in live.items() if k != "params"}
            group["params"] = [index[name] for name in saved["params"]]
            param_groups.append(group)
        state = {index[name]: value for name, value in stored["state"].items()}
        self.local.load_state_dict({"state": state, "param_groups": param_groups})
        if self.zero and self.restore_options:
            for live, options in zip(self.optimizer.param_groups, zero_groups):
                live.update(options)


class PythonRngAdapter:
    """Python's `random` and, when importable, NumPy's global generator.
    (torch's CPU and CUDA generators are captured by the C++ core.) With
    `enabled` false it saves nothing and ignores what it is given."""

    def __init__(self, enabled):
        self.enabled = enabled

    def save(self):
        if not self.enabled:
            return "python.rng", b"", {}
        # The generators' words as int64 tensors: stored as chunks (compressed),
        # not as ~7 KB of JSON digits each in every manifest.
        version, internal, gauss = random.getstate()
        state = {"random": [version, torch.tensor(internal, dtype=torch.int64), gauss]}
        try:
            import numpy
        except ImportError:
            numpy = None
        if numpy is not None:
            name, keys, pos, has_gauss, cached = numpy.random.get_state()
            state["numpy"] = [name, torch.from_numpy(keys.astype(numpy.int64)), int(pos), int(has_gauss),
                              float(cached)]
        tensors = {}
        payload = _dump(state, tensors)
        return "python.rng", payload, tensors

    def load(self, stored_type, payload, tensors):
        if not self.enabled:
            return
        if not payload:
            raise _trainsnap.ContractMismatch("requested by the target, absent from the snapshot")
        state = _load(payload, tensors)
        numpy = None
        if "numpy" in state:
            try:
                import numpy
            except ImportError:
                raise _trainsnap.NotSupported("the snapshot holds NumPy's state, NumPy is not importable") from None
            name, keys, pos, has_gauss, cached = state["numpy"]
            numpy_state = (name, keys.numpy().astype(numpy.uint32), pos, has_gauss, cached)
        version, internal, gauss = state["random"]
        random.setstate((version, tuple(internal.tolist()), gauss))
        if numpy is not None:
            numpy.random.set_state(numpy_state)
