"""Technical indicators of the FinRL state (MACD, RSI, CCI, ADX) and the turbulence index, in numpy.

Every indicator is defined from the first row on (no NaN warm-up): the smoothing averages are the
"adjusted" exponentially weighted means (weights renormalised over the rows seen so far), so a
series that starts inside the training window still yields a full-length feature matrix and the
trading env never has to drop days. Inputs are 1-D float arrays of one ticker in date order.
"""

from __future__ import annotations

import numpy as np


def ewm_mean(x: np.ndarray, alpha: float) -> np.ndarray:
    """Adjusted exponentially weighted mean: sum (1-a)^(t-i) x_i / sum (1-a)^(t-i)."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    num = 0.0
    den = 0.0
    decay = 1.0 - alpha
    for t, v in enumerate(x):
        num = num * decay + v
        den = den * decay + 1.0
        out[t] = num / den
    return out


def ema(x: np.ndarray, span: int) -> np.ndarray:
    """EMA with the usual span parametrisation alpha = 2 / (span + 1)."""
    return ewm_mean(x, 2.0 / (span + 1.0))


def wilder(x: np.ndarray, window: int) -> np.ndarray:
    """Wilder's smoothing (alpha = 1 / window), the average RSI and ADX are built on."""
    return ewm_mean(x, 1.0 / window)


def rolling_mean(x: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last ``window`` values (fewer at the start)."""
    x = np.asarray(x, dtype=np.float64)
    csum = np.concatenate([[0.0], np.cumsum(x)])
    idx = np.arange(len(x))
    lo = np.maximum(0, idx - window + 1)
    return (csum[idx + 1] - csum[lo]) / (idx + 1 - lo)


def macd(close: np.ndarray, fast: int = 12, slow: int = 26) -> np.ndarray:
    """MACD line: EMA(fast) - EMA(slow) of the close."""
    return ema(close, fast) - ema(close, slow)


def rsi(close: np.ndarray, window: int = 30) -> np.ndarray:
    """Relative strength index in [0, 100]; 50 where the price has not moved at all yet."""
    close = np.asarray(close, dtype=np.float64)
    diff = np.diff(close, prepend=close[0])
    up = wilder(np.clip(diff, 0.0, None), window)
    down = wilder(np.clip(-diff, 0.0, None), window)
    total = up + down
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(total > 0, 100.0 * up / np.where(total > 0, total, 1.0), 50.0)
    return out


def cci(high: np.ndarray, low: np.ndarray, close: np.ndarray, window: int = 30) -> np.ndarray:
    """Commodity channel index: (TP - SMA(TP)) / (0.015 * mean absolute deviation of TP)."""
    tp = (np.asarray(high, float) + np.asarray(low, float) + np.asarray(close, float)) / 3.0
    sma = rolling_mean(tp, window)
    mad = np.empty_like(tp)
    for t in range(len(tp)):
        lo = max(0, t - window + 1)
        mad[t] = np.mean(np.abs(tp[lo:t + 1] - sma[t]))
    return np.where(mad > 0, (tp - sma) / (0.015 * np.where(mad > 0, mad, 1.0)), 0.0)


def adx(high: np.ndarray, low: np.ndarray, close: np.ndarray, window: int = 30) -> np.ndarray:
    """Average directional index in [0, 100] (trend strength, sign-free)."""
    high, low, close = (np.asarray(a, dtype=np.float64) for a in (high, low, close))
    prev_close = np.concatenate([[close[0]], close[:-1]])
    up_move = np.diff(high, prepend=high[0])
    down_move = -np.diff(low, prepend=low[0])
    plus_dm = np.where((up_move > down_move) & (up_move > 0), up_move, 0.0)
    minus_dm = np.where((down_move > up_move) & (down_move > 0), down_move, 0.0)
    tr = np.maximum.reduce([high - low, np.abs(high - prev_close), np.abs(low - prev_close)])
    atr = wilder(tr, window)
    safe_atr = np.where(atr > 0, atr, 1.0)
    plus_di = np.where(atr > 0, 100.0 * wilder(plus_dm, window) / safe_atr, 0.0)
    minus_di = np.where(atr > 0, 100.0 * wilder(minus_dm, window) / safe_atr, 0.0)
    di_sum = plus_di + minus_di
    dx = np.where(di_sum > 0, 100.0 * np.abs(plus_di - minus_di) / np.where(di_sum > 0, di_sum, 1.0), 0.0)
    return wilder(dx, window)


INDICATORS = ("macd", "rsi_30", "cci_30", "adx_30")


def indicator_matrix(high: np.ndarray, low: np.ndarray, close: np.ndarray) -> np.ndarray:
    """The FinRL indicator set for one ticker as a [T, 4] array in the order of ``INDICATORS``."""
    return np.stack([macd(close), rsi(close, 30), cci(high, low, close, 30), adx(high, low, close, 30)], axis=1)


def turbulence_index(close: np.ndarray, lookback: int = 252) -> np.ndarray:
    """Mahalanobis distance of today's returns from the last ``lookback`` days' return distribution.

    ``close`` is [T, n]. Zero during the first ``lookback`` days, where there is no history to
    judge against; the pseudo-inverse keeps it defined for a single asset or collinear assets.
    """
    close = np.asarray(close, dtype=np.float64)
    if close.ndim == 1:
        close = close[:, None]
    ret = np.zeros_like(close)
    ret[1:] = close[1:] / close[:-1] - 1.0
    out = np.zeros(len(close))
    for t in range(lookback + 1, len(close)):
        hist = ret[t - lookback:t]
        dev = ret[t] - hist.mean(axis=0)
        cov = np.atleast_2d(np.cov(hist, rowvar=False))
        out[t] = float(dev @ np.linalg.pinv(cov) @ dev)
    return out
