"""Saving and loading fitted estimators without pickle.

A saved estimator is a zip archive: ``manifest.json`` (the format name and
version, the estimator's class, its parameters as JSON, and how each
fitted attribute is stored) and one member per array or model. Models are
the library's versioned saved-model bytes (the same as pickling uses);
arrays are ``.npy`` members read with ``allow_pickle=False``. Loading
creates only gramian's own estimator classes and calls only the
extension's ``load_*`` functions, so a file cannot run code.
"""

import io
import json
import numbers
import zipfile

import numpy as np

from . import _core
from .exceptions import GramianError, InvalidInputError

FORMAT = "gramian-estimator"
VERSION = 1


def _classes():
    from . import eksvd, mklaren, psd

    found = {}
    for module in (eksvd, mklaren, psd):
        for name in dir(module):
            cls = getattr(module, name)
            if isinstance(cls, type) and cls.__module__ == module.__name__ and hasattr(cls, "get_params") and not name.startswith("_"):
                found[name] = cls
    return found


def _is_json(value):
    if value is None or isinstance(value, (bool, str)):
        return True
    if isinstance(value, numbers.Integral):
        return True
    if isinstance(value, numbers.Real):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_json(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json(v) for k, v in value.items())
    return False


def _plain(value):
    """``value`` with numpy scalars as Python numbers and tuples tagged, for JSON."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return {"__tuple__": [_plain(v) for v in value]}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _unplain(value):
    if isinstance(value, dict):
        if set(value) == {"__tuple__"}:
            return tuple(_unplain(v) for v in value["__tuple__"])
        return {k: _unplain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unplain(v) for v in value]
    return value


def _npy(array):
    out = io.BytesIO()
    np.save(out, np.asarray(array), allow_pickle=False)
    return out.getvalue()


def save(estimator, path):
    """Saves a gramian estimator (fitted or not) to ``path``.

    The file holds the parameters, the fitted attributes and the fitted
    models in the library's versioned format; :func:`load` reads it back on
    any machine (the models compute on the CPU until refitted or moved).

    Parameters
    ----------
    estimator : a gramian estimator
    path : str or path-like

    Raises
    ------
    InvalidInputError
        For an object that is not a gramian estimator, or parameters or
        attributes that are not plain data (e.g. a ``numpy.random.RandomState``
        as ``random_state``: pass an integer seed).
    """
    classes = _classes()
    name = type(estimator).__name__
    if classes.get(name) is not type(estimator):
        raise InvalidInputError(f"save takes a gramian estimator, got {type(estimator).__module__}.{name}")
    params = estimator.get_params(deep=False)
    for key, value in params.items():
        value = _plain(value)
        if not _is_json(value) and not (isinstance(value, dict) and "__tuple__" in value):
            raise InvalidInputError(f"parameter {key}={params[key]!r} cannot be saved (only numbers, strings, None and lists of them)")
    members = {}
    attributes = {}
    for key, value in vars(estimator).items():
        if key in params:
            continue
        member = f"attributes/{key}"
        if type(value).__module__ == "gramian._core":
            loader, args = value.__reduce__()
            if not loader.__name__.startswith("load_") or not all(isinstance(a, bytes) for a in args):
                raise InvalidInputError(f"attribute {key} cannot be saved")
            for i, blob in enumerate(args):
                members[f"{member}.{i}.bin"] = blob
            attributes[key] = {"kind": "model", "loader": loader.__name__, "parts": len(args)}
        elif isinstance(value, np.ndarray):
            if value.dtype == object:
                raise InvalidInputError(f"attribute {key} is an object array and cannot be saved")
            members[f"{member}.npy"] = _npy(value)
            attributes[key] = {"kind": "array"}
        elif isinstance(value, list) and value and all(isinstance(v, np.ndarray) and v.dtype != object for v in value):
            for i, v in enumerate(value):
                members[f"{member}.{i}.npy"] = _npy(v)
            attributes[key] = {"kind": "arrays", "count": len(value)}
        else:
            plain = _plain(value)
            if not _is_json(plain) and not isinstance(plain, dict):
                raise InvalidInputError(f"attribute {key} of type {type(value).__name__} cannot be saved")
            attributes[key] = {"kind": "json", "value": plain}
    manifest = {"format": FORMAT, "version": VERSION, "class": name, "params": _plain(params), "attributes": attributes}
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("manifest.json", json.dumps(manifest))
        for member, blob in members.items():
            archive.writestr(member, blob)


def load(path):
    """Loads an estimator saved by :func:`save`.

    Parameters
    ----------
    path : str or path-like

    Returns
    -------
    estimator
        The estimator, of the class it was saved from, with its parameters
        and fitted attributes.

    Raises
    ------
    InvalidInputError
        For a file that is not a saved gramian estimator, of a newer format
        version, or damaged (a model's bytes fail the library's checks).
    """
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise InvalidInputError(f"{path}: not a saved gramian estimator ({e})") from None
    with archive:
        try:
            manifest = json.loads(archive.read("manifest.json"))
        except (KeyError, ValueError, zipfile.BadZipFile) as e:
            raise InvalidInputError(f"{path}: no readable manifest ({e})") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise InvalidInputError(f"{path}: not a saved gramian estimator")
        version = manifest.get("version")
        if not isinstance(version, int) or version > VERSION or version < 1:
            raise InvalidInputError(f"{path}: format version {version!r}; this package reads up to {VERSION}")
        cls = _classes().get(manifest.get("class"))
        if cls is None:
            raise InvalidInputError(f"{path}: unknown estimator class {manifest.get('class')!r}")
        params = manifest.get("params")
        attributes = manifest.get("attributes")
        if not isinstance(params, dict) or not isinstance(attributes, dict):
            raise InvalidInputError(f"{path}: damaged manifest")
        try:
            estimator = cls(**_unplain(params))
        except TypeError as e:
            raise InvalidInputError(f"{path}: parameters do not fit {cls.__name__}: {e}") from None

        def member(name):
            try:
                return archive.read(name)
            except (KeyError, zipfile.BadZipFile, OSError) as e:
                raise InvalidInputError(f"{path}: missing or damaged member {name} ({e})") from None

        def array(name):
            try:
                return np.load(io.BytesIO(member(name)), allow_pickle=False)
            except ValueError as e:
                raise InvalidInputError(f"{path}: damaged array {name} ({e})") from None

        for key, spec in attributes.items():
            if not isinstance(key, str) or not isinstance(spec, dict):
                raise InvalidInputError(f"{path}: damaged manifest")
            kind = spec.get("kind")
            base = f"attributes/{key}"
            if kind == "model":
                loader = spec.get("loader")
                parts = spec.get("parts")
                if not isinstance(loader, str) or not loader.startswith("load_") or not hasattr(_core, loader) or not isinstance(parts, int) or not 1 <= parts <= 8:
                    raise InvalidInputError(f"{path}: unknown model loader {loader!r}")
                blobs = [member(f"{base}.{i}.bin") for i in range(parts)]
                try:
                    value = getattr(_core, loader)(*blobs)
                except (GramianError, TypeError) as e:
                    raise InvalidInputError(f"{path}: damaged model {key} ({e})") from None
            elif kind == "array":
                value = array(f"{base}.npy")
            elif kind == "arrays":
                count = spec.get("count")
                if not isinstance(count, int) or not 0 <= count <= 1 << 16:
                    raise InvalidInputError(f"{path}: damaged manifest")
                value = [array(f"{base}.{i}.npy") for i in range(count)]
            elif kind == "json":
                value = _unplain(spec.get("value"))
            else:
                raise InvalidInputError(f"{path}: unknown attribute kind {kind!r}")
            setattr(estimator, key, value)
    return estimator
