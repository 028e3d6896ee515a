"""The scikit-learn estimators of terascale.linear on a bundled data set, and parse_lines.

    python examples/linear_sklearn.py
"""

from __future__ import annotations

from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

import terascale.linear as tl


def main() -> None:
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    Xtr, Xte, ytr, yte = train_test_split(X, y, random_state=0)
    clf = tl.LinearClassifier(bits=12, passes=2, bfgs=20).fit(Xtr, ytr)
    print("LinearClassifier test accuracy", clf.score(Xte, yte))
    print("first probabilities", clf.predict_proba(Xte[:3]).round(3).tolist())

    ds = tl.parse_lines(["1 'a|user age:0.3 |item books", "-1 'b|user age:0.7 |item tools"],
                        bits=18, quadratic=["ui"])
    model = tl.train(ds, passes=3)
    print("VW-text model", model, "predictions", model.predict(ds).round(3).tolist())


if __name__ == "__main__":
    main()
