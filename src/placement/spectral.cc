#include "placement/spectral.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>

namespace epserve::placement {
namespace {

// A uniform double in [0, 1) that does not depend on the standard library's distributions.
double Uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

double SquaredDistance(const double* a, const double* b, int dim) {
  double s = 0;
  for (int d = 0; d < dim; ++d) s += (a[d] - b[d]) * (a[d] - b[d]);
  return s;
}

struct Clustering {
  std::vector<int> labels;
  double inertia = std::numeric_limits<double>::infinity();
};

Clustering RunLloyd(const std::vector<double>& points, int n, int dim, int k, std::mt19937_64& rng,
                    int max_iterations) {
  // k-means++ seeding.
  std::vector<double> centers(static_cast<size_t>(k) * dim);
  std::vector<double> nearest(n, std::numeric_limits<double>::infinity());
  int first = static_cast<int>(Uniform(rng) * n);
  std::copy_n(&points[static_cast<size_t>(first) * dim], dim, centers.begin());
  for (int c = 1; c < k; ++c) {
    double total = 0;
    for (int i = 0; i < n; ++i) {
      nearest[i] =
          std::min(nearest[i], SquaredDistance(&points[static_cast<size_t>(i) * dim],
                                               &centers[static_cast<size_t>(c - 1) * dim], dim));
      total += nearest[i];
    }
    int pick = n - 1;
    if (total > 0) {
      double u = Uniform(rng) * total;
      for (int i = 0; i < n; ++i) {
        u -= nearest[i];
        if (u < 0) {
          pick = i;
          break;
        }
      }
    } else {
      pick = static_cast<int>(Uniform(rng) * n);
    }
    std::copy_n(&points[static_cast<size_t>(pick) * dim], dim,
                centers.begin() + static_cast<size_t>(c) * dim);
  }

  Clustering result;
  result.labels.assign(n, -1);
  std::vector<double> dist(n);
  std::vector<int> count(k);
  for (int iter = 0; iter < max_iterations; ++iter) {
    bool changed = false;
    for (int i = 0; i < n; ++i) {
      int best = 0;
      double best_d = std::numeric_limits<double>::infinity();
      for (int c = 0; c < k; ++c) {
        const double d = SquaredDistance(&points[static_cast<size_t>(i) * dim],
                                         &centers[static_cast<size_t>(c) * dim], dim);
        if (d < best_d) {
          best_d = d;
          best = c;
        }
      }
      dist[i] = best_d;
      if (result.labels[i] != best) changed = true;
      result.labels[i] = best;
    }
    // Refill empty clusters with the point farthest from its center.
    std::fill(count.begin(), count.end(), 0);
    for (int i = 0; i < n; ++i) ++count[result.labels[i]];
    for (int c = 0; c < k; ++c) {
      if (count[c] > 0) continue;
      int far = -1;
      for (int i = 0; i < n; ++i) {
        if (count[result.labels[i]] > 1 && (far < 0 || dist[i] > dist[far])) far = i;
      }
      --count[result.labels[far]];
      result.labels[far] = c;
      count[c] = 1;
      dist[far] = 0;
      changed = true;
    }
    std::fill(centers.begin(), centers.end(), 0.0);
    for (int i = 0; i < n; ++i) {
      double* center = &centers[static_cast<size_t>(result.labels[i]) * dim];
      for (int d = 0; d < dim; ++d) center[d] += points[static_cast<size_t>(i) * dim + d];
    }
    for (int c = 0; c < k; ++c) {
      for (int d = 0; d < dim; ++d) centers[static_cast<size_t>(c) * dim + d] /= count[c];
    }
    if (!changed) break;
  }
  result.inertia = 0;
  for (int i = 0; i < n; ++i) {
    result.inertia += SquaredDistance(&points[static_cast<size_t>(i) * dim],
                                      &centers[static_cast<size_t>(result.labels[i]) * dim], dim);
  }
  return result;
}

void RenumberByFirstAppearance(int k, std::vector<int>* labels) {
  std::vector<int> map(k, -1);
  int next = 0;
  for (int& l : *labels) {
    if (map[l] < 0) map[l] = next++;
    l = map[l];
  }
}

}  // namespace

StatusOr<std::vector<int>> KMeans(const std::vector<double>& points, int num_points, int dim,
                                  const KMeansOptions& options) {
  const int k = options.num_clusters;
  if (num_points < 1 || dim < 1 || points.size() != static_cast<size_t>(num_points) * dim) {
    return Status::InvalidArgument("k-means: points do not match num_points x dim");
  }
  if (k < 1 || k > num_points) {
    return Status::InvalidArgument("k-means: cannot make " + std::to_string(k) + " clusters of " +
                                   std::to_string(num_points) + " points");
  }
  std::mt19937_64 rng(options.seed);
  Clustering best;
  for (int r = 0; r < std::max(1, options.restarts); ++r) {
    Clustering c = RunLloyd(points, num_points, dim, k, rng, options.max_iterations);
    if (c.inertia < best.inertia - 1e-12) best = std::move(c);
  }
  RenumberByFirstAppearance(k, &best.labels);
  return best.labels;
}

StatusOr<std::vector<int>> SpectralCluster(const std::vector<double>& affinity, int n,
                                           const SpectralOptions& options) {
  const int k = options.num_clusters;
  if (n < 1 || affinity.size() != static_cast<size_t>(n) * n) {
    return Status::InvalidArgument("spectral clustering: affinity is not n x n");
  }
  if (k < 1 || k > n) {
    return Status::InvalidArgument("spectral clustering: cannot make " + std::to_string(k) +
                                   " clusters of " + std::to_string(n) + " experts");
  }
  Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> a(
      affinity.data(), n, n);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (!(a(i, j) >= 0) || a(i, j) != a(j, i)) {
        return Status::InvalidArgument(
            "spectral clustering: affinity must be symmetric and "
            "non-negative");
      }
    }
  }
  if (k == 1) return std::vector<int>(n, 0);
  if (k == n) {
    std::vector<int> labels(n);
    for (int i = 0; i < n; ++i) labels[i] = i;
    return labels;
  }
  // Self-loops do not change the cut; the diagonal is ignored.
  Eigen::VectorXd inv_sqrt_degree(n);
  for (int i = 0; i < n; ++i) {
    const double d = a.row(i).sum() - a(i, i);
    inv_sqrt_degree(i) = d > 0 ? 1.0 / std::sqrt(d) : 0.0;
  }
  Eigen::MatrixXd laplacian(n, n);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      laplacian(i, j) =
          (i == j ? 1.0 : 0.0) - (i == j ? 0.0 : inv_sqrt_degree(i) * a(i, j) * inv_sqrt_degree(j));
    }
  }
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> solver(laplacian);
  if (solver.info() != Eigen::Success) {
    return Status::Internal("spectral clustering: eigen-solver did not converge");
  }
  // Eigenvalues come in ascending order: the first k columns span the cluster indicators.
  std::vector<double> embedding(static_cast<size_t>(n) * k);
  for (int i = 0; i < n; ++i) {
    double norm = 0;
    for (int c = 0; c < k; ++c) norm += solver.eigenvectors()(i, c) * solver.eigenvectors()(i, c);
    norm = std::sqrt(norm);
    for (int c = 0; c < k; ++c) {
      // A column's sign is arbitrary but flipping it mirrors every point alike, which leaves
      // all distances and so the k-means result unchanged.
      embedding[static_cast<size_t>(i) * k + c] =
          norm > 0 ? solver.eigenvectors()(i, c) / norm : 0.0;
    }
  }
  return KMeans(embedding, n, k,
                KMeansOptions{.num_clusters = k,
                              .seed = options.seed,
                              .restarts = options.kmeans_restarts,
                              .max_iterations = 100});
}

}  // namespace epserve::placement
