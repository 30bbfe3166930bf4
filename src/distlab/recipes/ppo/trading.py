"""Multi-asset stock-trading environment in the FinRL lineage, plus the CSV readers that feed it.

A day's state is ``[cash, close prices (n), holdings (n), indicators (4n)]``. Actions in ``[-1, 1]^n``
are scaled by ``hmax`` to whole share counts; sells execute before buys so that the cash freed by
selling can fund the day's purchases. Every trade pays ``transaction_cost`` of its value, and the
reward is the change of portfolio value (cash + holdings at close) times ``reward_scaling``. When
a turbulence threshold is set and today's turbulence reaches it, the agent is forced to sell
everything and may not buy: the crash-protection rule of Yang et al. (ICAIF 2020).
"""

from __future__ import annotations

import csv
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import gymnasium as gym
import numpy as np

from distlab.errors import DistlabError
from distlab.recipes.ppo.indicators import INDICATORS, indicator_matrix

LONG_COLUMNS = ("date", "tic", "open", "high", "low", "close", "volume")
DEFAULT_MARKET_DIR = Path(__file__).resolve().parents[4] / ".." / "shared" / "data" / "market"


@dataclass
class Bars:
    """Daily OHLCV bars of one ticker, sorted by date (ISO strings compare in date order)."""

    tic: str
    dates: np.ndarray
    open: np.ndarray
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray
    volume: np.ndarray


@dataclass
class MarketData:
    """Aligned panel the env trades on: ``close`` [T, n], ``features`` [T, n, 4], ``turbulence`` [T]."""

    dates: np.ndarray
    tics: list[str]
    close: np.ndarray
    features: np.ndarray
    turbulence: np.ndarray | None = None
    feature_names: tuple[str, ...] = field(default=INDICATORS)

    def __len__(self) -> int:
        return len(self.dates)


def _iso(date: str) -> str:
    """Normalise '20090102' or '2009-01-02' (or '2009-01-02 00:00:00') to '2009-01-02'."""
    d = date.strip()[:10]
    if len(d) == 8 and d.isdigit():
        return f"{d[:4]}-{d[4:6]}-{d[6:]}"
    if len(d) == 10 and d[4] == "-" and d[7] == "-":
        return d
    raise DistlabError(f"unreadable date {date!r}: use YYYY-MM-DD or YYYYMMDD")


def _bars_from_rows(tic: str, rows: list[tuple[str, float, float, float, float, float]]) -> Bars:
    rows = sorted(rows)
    arr = np.array([r[1:] for r in rows], dtype=np.float64)
    return Bars(tic, np.array([r[0] for r in rows]), *arr.T)


def _float(x: str) -> float:
    return float(x) if x.strip() not in ("", "null", "nan", "NaN") else float("nan")


def read_ohlcv_csv(path: str | Path, tic: str | None = None) -> dict[str, Bars]:
    """Read one CSV in any of the three layouts in use and return bars per ticker.

    Layouts: FinRL long format (date,tic,open,high,low,close,volume), Yahoo (Date,Open,High,Low,
    Close,Adj Close,Volume; one ticker, named by ``tic`` or the file stem) and Compustat daily
    (datadate,tic,prccd,ajexdi,prcod,prchd,prcld,cshtrd; prices divided by the adjustment factor
    ajexdi so splits do not look like crashes). Rows with a missing close are dropped.
    """
    path = Path(path)
    if not path.is_file():
        raise DistlabError(f"market data file {path} does not exist: pass an existing CSV path")
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        cols = {c.strip().lower(): c for c in reader.fieldnames or []}
        rows: dict[str, list] = {}
        if set(LONG_COLUMNS) <= set(cols):
            def parse(r):
                return r[cols["tic"]], (_iso(r[cols["date"]]), *(_float(r[cols[k]]) for k in LONG_COLUMNS[2:]))
        elif {"date", "open", "high", "low", "close", "volume"} <= set(cols):
            name = tic or path.stem.split("_")[0]

            def parse(r):
                return name, (_iso(r[cols["date"]]),
                              *(_float(r[cols[k]]) for k in ("open", "high", "low", "close", "volume")))
        elif {"datadate", "tic", "prccd", "prcod", "prchd", "prcld", "cshtrd"} <= set(cols):
            def parse(r):
                adj = _float(r[cols["ajexdi"]]) if "ajexdi" in cols else 1.0
                adj = adj if adj and adj == adj else 1.0
                px = [_float(r[cols[k]]) / adj for k in ("prcod", "prchd", "prcld", "prccd")]
                return r[cols["tic"]], (_iso(r[cols["datadate"]]), *px, _float(r[cols["cshtrd"]]))
        else:
            raise DistlabError(f"{path}: unknown columns {reader.fieldnames}; expected FinRL long format "
                               f"({','.join(LONG_COLUMNS)}), Yahoo or Compustat daily columns")
        for r in reader:
            name, row = parse(r)
            if row[4] == row[4]:
                rows.setdefault(name, []).append(row)
    return {name: _bars_from_rows(name, rs) for name, rs in rows.items()}


def read_turbulence_csv(path: str | Path) -> dict[str, float]:
    """Date -> turbulence from a ``datadate,turbulence`` (or ``date,turbulence``) CSV."""
    with Path(path).open(newline="") as f:
        reader = csv.DictReader(f)
        key = "datadate" if "datadate" in (reader.fieldnames or []) else "date"
        return {_iso(r[key]): float(r["turbulence"]) for r in reader}


def build_market(bars: dict[str, Bars], turbulence: dict[str, float] | None = None) -> MarketData:
    """Align tickers on their common dates and compute indicators on each ticker's full history.

    Indicators are computed before any train/trade split so that the first trading day already
    sees indicators warmed up on the preceding data, as a live trader would.
    """
    if not bars:
        raise DistlabError("no tickers to trade: give at least one CSV with price rows")
    tics = sorted(bars)
    common = set(bars[tics[0]].dates)
    for t in tics[1:]:
        common &= set(bars[t].dates)
    if turbulence is not None:
        common &= set(turbulence)
    dates = np.array(sorted(common))
    if len(dates) < 2:
        raise DistlabError(f"tickers {tics} share fewer than 2 dates: check that the CSVs cover one period")
    close, feats = [], []
    for t in tics:
        b = bars[t]
        f = indicator_matrix(b.high, b.low, b.close)
        keep = np.isin(b.dates, dates)
        close.append(b.close[keep])
        feats.append(f[keep])
    turb = None if turbulence is None else np.array([turbulence[d] for d in dates])
    return MarketData(dates, tics, np.stack(close, 1), np.stack(feats, 1), turb)


def split_by_date(market: MarketData, start: str | None = None, end: str | None = None) -> MarketData:
    """Rows with start <= date < end (either bound optional), e.g. train to 2016-01-01, trade after."""
    lo = _iso(start) if start else ""
    hi = _iso(end) if end else "9999-99-99"
    keep = (market.dates >= lo) & (market.dates < hi)
    if keep.sum() < 2:
        raise DistlabError(f"date range [{start}, {end}) keeps {int(keep.sum())} trading days of "
                           f"{market.dates[0]}..{market.dates[-1]}: widen the range")
    turb = None if market.turbulence is None else market.turbulence[keep]
    return MarketData(market.dates[keep], market.tics, market.close[keep], market.features[keep], turb,
                      market.feature_names)


def check_market_files(paths: str | None) -> None:
    """Before any process starts: every CSV of ``trading_data`` (default: DJI and SPY of the shared data) exists."""
    names = [x for x in paths.split(",") if x] if paths else [
        str(DEFAULT_MARKET_DIR / "DJI_2009_2020.csv"), str(DEFAULT_MARKET_DIR / "SPY_2009_2020.csv")]
    for name in names:
        if not Path(name).is_file():
            where = "" if paths else " (the default, ../shared/data/market beside the repository)"
            raise DistlabError(f"market data {name} not found{where}; pass existing CSVs with "
                               f"trading_data=a.csv,b.csv")


def load_market(paths: str | list[str] | None = None, turbulence: str | bool | None = None) -> MarketData:
    """Load and align price CSVs; ``None`` means DJI + SPY from the shared market folder.

    ``turbulence``: a CSV path, ``True`` for the shared Dow-30 turbulence file, or None for none.
    """
    if paths is None:
        paths = [str(DEFAULT_MARKET_DIR / "DJI_2009_2020.csv"), str(DEFAULT_MARKET_DIR / "SPY_2009_2020.csv")]
    elif isinstance(paths, str):
        paths = [p for p in paths.split(",") if p]
    bars: dict[str, Bars] = {}
    for p in paths:
        bars.update(read_ohlcv_csv(p))
    if turbulence is True:
        turbulence = str(DEFAULT_MARKET_DIR / "dow30_turbulence_2009_2020.csv")
    turb = read_turbulence_csv(turbulence) if turbulence else None
    return build_market(bars, turb)


@dataclass
class TradeResult:
    """What one day's order did: shares traded per asset (signed) and fees paid."""

    shares: np.ndarray
    cost: float


def execute_orders(cash: float, holdings: np.ndarray, prices: np.ndarray, orders: np.ndarray,
                   cost_pct: float) -> tuple[float, np.ndarray, TradeResult]:
    """Apply signed integer share orders: all sells first, then buys largest first while cash lasts.

    Sells are capped at the shares held (no shorting); each buy is capped at what the cash left
    can pay including the fee. Equal orders go in asset order (stable sort), so the outcome does not
    depend on numpy's sorting algorithm and the batched env can reproduce it.
    """
    holdings = holdings.copy()
    traded = np.zeros_like(holdings)
    fees = 0.0
    for i in np.argsort(orders, kind="stable"):
        if orders[i] >= 0:
            break
        n = min(-orders[i], holdings[i])
        if n > 0:
            value = prices[i] * n
            cash += value * (1.0 - cost_pct)
            fees += value * cost_pct
            holdings[i] -= n
            traded[i] -= n
    for i in np.argsort(-orders, kind="stable"):
        if orders[i] <= 0:
            break
        if prices[i] <= 0:
            continue
        n = min(orders[i], np.floor(cash / (prices[i] * (1.0 + cost_pct))))
        if n > 0:
            value = prices[i] * n
            cash -= value * (1.0 + cost_pct)
            fees += value * cost_pct
            holdings[i] += n
            traded[i] += n
    return cash, holdings, TradeResult(traded, fees)


def check_env_params(market: MarketData, hmax: int, initial_amount: float, transaction_cost: float, window: int,
                     turbulence_threshold: float | None) -> None:
    """The checks the scalar and the batched env share, so both refuse the same settings with the same words."""
    if hmax < 1 or initial_amount <= 0 or not 0 <= transaction_cost < 1 or window < 1:
        raise DistlabError("trading env needs hmax >= 1, initial_amount > 0, 0 <= transaction_cost < 1 "
                           "and window >= 1")
    if turbulence_threshold is not None and market.turbulence is None:
        raise DistlabError("turbulence_threshold is set but the market data has no turbulence: "
                           "load it with turbulence=True or a CSV path")


class StockTradingEnv(gym.Env):
    """Trade ``n`` assets day by day over a :class:`MarketData` period; one episode = the period.

    ``scale_obs`` divides cash by the starting amount, prices by the period's first prices,
    holdings by ``hmax`` and indicators to O(1) ranges, because raw dollar amounts (1e6) next to
    RSI values (50) make a single learning rate useless. ``window`` > 1 stacks the last W daily
    states into a [W, F] observation for the cascaded-LSTM feature extractor.
    """

    metadata = {"render_modes": []}

    def __init__(self, market: MarketData, hmax: int = 100, initial_amount: float = 1e6,
                 transaction_cost: float = 0.001, reward_scaling: float = 1e-4,
                 turbulence_threshold: float | None = None, window: int = 1, scale_obs: bool = True):
        check_env_params(market, hmax, initial_amount, transaction_cost, window, turbulence_threshold)
        self.market = market
        self.n = len(market.tics)
        self.hmax = hmax
        self.initial_amount = float(initial_amount)
        self.cost_pct = transaction_cost
        self.reward_scaling = reward_scaling
        self.turbulence_threshold = turbulence_threshold
        self.window = window
        self.scale_obs = scale_obs
        self.state_dim = 1 + 2 * self.n + self.n * market.features.shape[2]
        shape = (self.state_dim,) if window == 1 else (window, self.state_dim)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape, np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (self.n,), np.float32)
        self._price0 = market.close[0].copy()
        self._history: deque[np.ndarray] = deque(maxlen=window)

    # -- state -------------------------------------------------------------------------------
    def portfolio_value(self) -> float:
        return float(self.cash + self.holdings @ self.market.close[self.day])

    def _day_state(self) -> np.ndarray:
        close = self.market.close[self.day]
        feats = self.market.features[self.day]
        if self.scale_obs:
            scale = np.array([1.0, 0.01, 0.01, 0.01])
            feats = feats.copy()
            feats[:, 0] = feats[:, 0] / close
            feats[:, 1:] *= scale[1:]
            parts = [[self.cash / self.initial_amount], close / self._price0, self.holdings / self.hmax,
                     feats.reshape(-1)]
        else:
            parts = [[self.cash], close, self.holdings, feats.reshape(-1)]
        return np.concatenate(parts).astype(np.float32)

    def _obs(self) -> np.ndarray:
        s = self._day_state()
        if self.window == 1:
            return s
        if not self._history:
            self._history.extend([s] * self.window)
        else:
            self._history.append(s)
        return np.stack(self._history)

    def _info(self, trade: TradeResult | None = None) -> dict:
        info = {"portfolio_value": self.portfolio_value(), "day": self.day, "cash": self.cash}
        if trade is not None:
            info.update(cost=trade.cost, shares=trade.shares)
        return info

    # -- gym API -----------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.day = 0
        self.cash = self.initial_amount
        self.holdings = np.zeros(self.n)
        self._history.clear()
        return self._obs(), self._info()

    def orders_from_action(self, action: np.ndarray) -> np.ndarray:
        """Scale [-1, 1] actions to whole shares (truncated toward zero)."""
        a = np.clip(np.asarray(action, dtype=np.float64).reshape(self.n), -1.0, 1.0)
        return np.trunc(a * self.hmax)

    def turbulent(self) -> bool:
        return (self.turbulence_threshold is not None
                and self.market.turbulence[self.day] >= self.turbulence_threshold)

    def step(self, action):
        before = self.portfolio_value()
        prices = self.market.close[self.day]
        if self.turbulent():
            orders = -self.holdings
        else:
            orders = self.orders_from_action(action)
        self.cash, self.holdings, trade = execute_orders(self.cash, self.holdings, prices, orders, self.cost_pct)
        self.day += 1
        after = self.portfolio_value()
        terminated = self.day >= len(self.market) - 1
        reward = (after - before) * self.reward_scaling
        return self._obs(), float(reward), terminated, False, self._info(trade)


def make_trading_env(market: MarketData | None = None, data: str | list[str] | None = None,
                     start: str | None = None, end: str | None = None, turbulence: str | bool | None = None,
                     **env_kw) -> StockTradingEnv:
    """Build the env from a loaded market or from CSV paths, restricted to [start, end)."""
    if market is None:
        need_turb = turbulence if turbulence is not None else env_kw.get("turbulence_threshold") is not None
        market = load_market(data, need_turb or None)
    if start or end:
        market = split_by_date(market, start, end)
    return StockTradingEnv(market, **env_kw)
