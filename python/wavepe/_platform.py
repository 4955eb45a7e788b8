"""What machine this is, for the records that benchmarks and experiments write."""

from __future__ import annotations

import platform


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux), else what ``platform`` knows.

    On x86 the family and model numbers follow the name, because virtual machines often report a
    bare "AMD EPYC" for Zen 2, 3, 4 and 5 alike, whose speeds differ (``AMD EPYC (family 25 model 1)``).
    """
    try:
        fields: dict[str, str] = {}
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, sep, value = line.partition(":")
                key = key.strip()
                if not sep:
                    if fields:
                        break  # the end of the first processor's block
                    continue
                fields.setdefault(key, value.strip())
        name = fields.get("model name")
        if name:
            if "cpu family" in fields and "model" in fields:
                return f"{name} (family {fields['cpu family']} model {fields['model']})"
            return name
    except OSError:
        pass
    return platform.processor() or platform.machine()
