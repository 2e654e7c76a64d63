#!/usr/bin/env python3
"""The coefficients of the erf in src/ops/gelu.rs (`erf_f64`): a rational fit
erf(z) / z ~ P(t) / Q(t), t = z^2, on z in [0, C], P of degree M and Q of degree N in t,
Q(0) = 1, minimising the largest relative error.

Method: the linearised least-squares problem P(t_i) - f_i Q(t_i) ~ 0 on 501 Chebyshev points of
[0, C] (in z), each row divided by f_i Q_prev(t_i) so that the residual approximates the
relative error of P/Q (the Sanathanan-Koerner iteration), with Lawson's reweighting (each
point's weight times its error) to move the least-squares solution towards the minimax one;
the best of 60 iterations is kept. Computed in mpmath at 40 digits; prints the largest relative
error on the points and the coefficients, then f64 literals.

    python3 tools/erf_fit.py [M N C]      (defaults 6 5 4: relative error 2.04e-9, about 15 s)

Needs mpmath (`python3 -m pip install mpmath`).
"""
import sys

import mpmath as mp

mp.mp.dps = 40
m, n = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else (6, 5)
C = mp.mpf(sys.argv[3]) if len(sys.argv) > 3 else mp.mpf(4)
POINTS = 500
zs = [C * (1 - mp.cos(mp.pi * (i + mp.mpf(0.5)) / POINTS)) / 2 for i in range(POINTS)] + [C]
ts = [z * z for z in zs]
fs = [2 / mp.sqrt(mp.pi) if t == 0 else mp.erf(mp.sqrt(t)) / mp.sqrt(t) for t in ts]


def horner(c, t):
    r = mp.mpf(0)
    for a in reversed(c):
        r = r * t + a
    return r


q = [mp.mpf(1)] + [mp.mpf(0)] * n
lawson = [mp.mpf(1)] * len(ts)
best = None
for it in range(60):
    rows, rhs = [], []
    for t, f, w in zip(ts, fs, lawson):
        s = mp.sqrt(w) / (f * horner(q, t))
        rows.append([s * t**j for j in range(m + 1)] + [-s * f * t**j for j in range(1, n + 1)])
        rhs.append(s * f)
    sol, _ = mp.qr_solve(mp.matrix(rows), mp.matrix(rhs))
    p = [sol[j] for j in range(m + 1)]
    q = [mp.mpf(1)] + [sol[m + 1 + j] for j in range(n)]
    errs = [horner(p, t) / horner(q, t) / f - 1 for t, f in zip(ts, fs)]
    worst = max(abs(e) for e in errs)
    if best is None or worst < best[0]:
        best = (worst, p, q)
    total = sum(w * abs(e) for w, e in zip(lawson, errs))
    lawson = [w * abs(e) / total for w, e in zip(lawson, errs)]
worst, p, q = best
print(f"M={m} N={n} C={mp.nstr(C, 5)}: largest relative error {mp.nstr(worst, 5)}")
print("P:", ", ".join(repr(float(c)) for c in p))
print("Q:", ", ".join(repr(float(c)) for c in q))
