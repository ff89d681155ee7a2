//! Statistics shared by `bench` and `trace`: medians, percentiles, the linear cost fit.

/// The `p`-th percentile (0 < p ≤ 100) of `v` by the nearest-rank method; `None` if empty.
pub fn percentile(v: &[u64], p: f64) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    let rank = ((p / 100.0) * s.len() as f64).ceil() as usize;
    Some(s[rank.clamp(1, s.len()) - 1])
}

/// The median of `v` (mean of the two middle values when even); `None` if empty.
pub fn median(v: &[u64]) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    let m = s.len() / 2;
    Some(if s.len() % 2 == 1 {
        s[m]
    } else {
        // The mean of the two middle values, without overflow.
        s[m - 1] / 2 + s[m] / 2 + (s[m - 1] % 2 + s[m] % 2) / 2
    })
}

/// A least-squares fit `y = intercept + slope·x`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct LinearFit {
    pub intercept: f64,
    pub slope: f64,
    /// Coefficient of determination; 1 when every y is the same.
    pub r2: f64,
    /// Standard error of the slope (0 with two points: a line fits them exactly).
    pub slope_se: f64,
    /// Mean of the y values (the model when the slope is not told apart from 0).
    pub mean_y: f64,
    /// Points the fit was made from.
    pub points: usize,
    /// The x range fitted; predictions outside it are extrapolations.
    pub x_min: f64,
    pub x_max: f64,
}

impl LinearFit {
    /// Fits `points` (x, y) by ordinary least squares; `None` with fewer than two distinct x.
    pub fn fit(points: &[(f64, f64)]) -> Option<LinearFit> {
        let n = points.len() as f64;
        if points.len() < 2 {
            return None;
        }
        let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
        let my = points.iter().map(|p| p.1).sum::<f64>() / n;
        let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
        if sxx == 0.0 {
            return None;
        }
        let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let slope = sxy / sxx;
        let intercept = my - slope * mx;
        let ss_tot: f64 = points.iter().map(|p| (p.1 - my).powi(2)).sum();
        let ss_res: f64 = points
            .iter()
            .map(|p| (p.1 - (intercept + slope * p.0)).powi(2))
            .sum();
        let r2 = if ss_tot == 0.0 {
            1.0
        } else {
            1.0 - ss_res / ss_tot
        };
        let slope_se = if points.len() > 2 {
            (ss_res / (n - 2.0) / sxx).sqrt()
        } else {
            0.0
        };
        let x_min = points.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
        let x_max = points.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
        Some(LinearFit {
            intercept,
            slope,
            r2,
            slope_se,
            mean_y: my,
            points: points.len(),
            x_min,
            x_max,
        })
    }

    /// Half-width of the slope's 95% confidence interval (Student's t, n−2 degrees of
    /// freedom); `None` with two points, where a line fits exactly and the data say nothing
    /// about the slope's uncertainty.
    pub fn slope_ci95(&self) -> Option<f64> {
        // Two-sided 97.5% quantiles of Student's t for 1..=10 degrees of freedom.
        const T: [f64; 10] = [
            12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
        ];
        match self.points.saturating_sub(2) {
            0 => None,
            df @ 1..=10 => Some(T[df - 1] * self.slope_se),
            _ => Some(1.96 * self.slope_se),
        }
    }

    /// Whether the slope is not significantly above 0 at 95%: the cost is flat in x.
    /// (No strategy gets cheaper with more possible fds, so a negative slope is noise.)
    /// Two points cannot show a slope, so they count as flat.
    pub fn is_flat(&self) -> bool {
        self.slope_ci95().is_none_or(|ci| self.slope <= ci)
    }

    /// The fitted y at `x`.
    pub fn predict(&self, x: f64) -> f64 {
        self.intercept + self.slope * x
    }

    /// Whether `x` lies outside the fitted range.
    pub fn extrapolates(&self, x: f64) -> bool {
        x < self.x_min || x > self.x_max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<u64> = (1..=20).collect();
        assert_eq!(percentile(&v, 95.0), Some(19));
        assert_eq!(percentile(&v, 100.0), Some(20));
        assert_eq!(percentile(&v, 50.0), Some(10));
        assert_eq!(percentile(&[7], 95.0), Some(7));
        assert_eq!(percentile(&[3, 1, 2], 95.0), Some(3));
        assert_eq!(percentile(&[], 95.0), None);
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[5, 1, 3]), Some(3));
        assert_eq!(median(&[4, 1, 3, 2]), Some(2));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[5]), Some(5));
        assert_eq!(median(&[u64::MAX, u64::MAX]), Some(u64::MAX));
    }

    #[test]
    fn fits_an_exact_line() {
        let pts: Vec<(f64, f64)> = [1024.0, 4096.0, 16384.0, 20000.0]
            .iter()
            .map(|&x| (x, 500_000.0 + 250.0 * x))
            .collect();
        let f = LinearFit::fit(&pts).expect("fits");
        assert!((f.slope - 250.0).abs() < 1e-9, "slope {}", f.slope);
        assert!(
            (f.intercept - 500_000.0).abs() < 1e-6,
            "intercept {}",
            f.intercept
        );
        assert!((f.r2 - 1.0).abs() < 1e-12, "r2 {}", f.r2);
        assert!((f.predict(524_288.0) - (500_000.0 + 250.0 * 524_288.0)).abs() < 1e-3);
        assert!(f.extrapolates(65536.0) && !f.extrapolates(4096.0));
        assert_eq!((f.x_min, f.x_max, f.points), (1024.0, 20000.0, 4));
        assert!(!f.is_flat(), "an exact line has a slope");
    }

    #[test]
    fn fits_flat_and_noisy_data() {
        let flat = LinearFit::fit(&[(1.0, 7.0), (2.0, 7.0), (3.0, 7.0)]).expect("fits");
        assert_eq!((flat.slope, flat.intercept, flat.r2), (0.0, 7.0, 1.0));
        // Noisy points: slope = Sxy/Sxx = 3/5, R² strictly between 0 and 1.
        let noisy =
            LinearFit::fit(&[(0.0, 1.0), (1.0, 0.0), (2.0, 3.0), (3.0, 2.0)]).expect("fits");
        assert!((noisy.slope - 0.6).abs() < 1e-12, "slope {}", noisy.slope);
        assert!(noisy.r2 > 0.0 && noisy.r2 < 1.0, "r2 {}", noisy.r2);
        // SSres = 3.2 (residuals 0.4, -1.2, 1.2, -0.4), se = sqrt(3.2 / 2 / 5) = 0.5657.
        assert!(
            (noisy.slope_se - 0.32f64.sqrt()).abs() < 1e-12,
            "se {}",
            noisy.slope_se
        );
        assert!((noisy.slope_ci95().expect("4 points") - 4.303 * 0.32f64.sqrt()).abs() < 1e-9);
        assert!(noisy.is_flat(), "0.6 ± 2.4 is not told apart from 0");
        assert!(flat.is_flat());
        let down = LinearFit::fit(&[(1.0, 3.0), (2.0, 2.0), (3.0, 1.0)]).expect("fits");
        assert!(down.is_flat(), "a falling cost is treated as flat noise");
        let two = LinearFit::fit(&[(1.0, 1.0), (2.0, 5.0)]).expect("fits");
        assert_eq!(two.slope_ci95(), None, "two points have no interval");
        assert!(two.is_flat(), "two points cannot show a slope");
    }

    #[test]
    fn refuses_degenerate_input() {
        assert_eq!(LinearFit::fit(&[]), None);
        assert_eq!(LinearFit::fit(&[(1.0, 2.0)]), None);
        assert_eq!(LinearFit::fit(&[(1.0, 2.0), (1.0, 3.0)]), None);
    }
}
