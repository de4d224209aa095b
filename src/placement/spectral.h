// Spectral clustering of an affinity graph (SPEC §8 step 2): the normalized Laplacian
// L = I - D^-1/2 A D^-1/2, its eigenvectors of the k smallest eigenvalues as an embedding, rows
// scaled to unit length (Ng, Jordan and Weiss), then k-means on the rows.
// Deterministic: the same input and seed give the same labels on every machine.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"

namespace epserve::placement {

struct KMeansOptions {
  int num_clusters = 2;
  uint64_t seed = 1;
  int restarts = 8;  // k-means++ starts; the lowest within-cluster sum of squares wins
  int max_iterations = 100;
};

// Clusters `num_points` points of `dim` coordinates (row-major) into num_clusters non-empty
// clusters. Labels are renumbered in order of first appearance (point 0 is in cluster 0).
// Returns InvalidArgument unless 1 <= num_clusters <= num_points.
StatusOr<std::vector<int>> KMeans(const std::vector<double>& points, int num_points, int dim,
                                  const KMeansOptions& options);

struct SpectralOptions {
  int num_clusters = 2;
  uint64_t seed = 1;
  int kmeans_restarts = 8;
};

// Labels each of the n nodes of the symmetric, non-negative affinity matrix (n x n, row-major)
// with a cluster in [0, num_clusters). Returns InvalidArgument for a matrix of the wrong size,
// a negative or asymmetric entry, or num_clusters outside [1, n].
StatusOr<std::vector<int>> SpectralCluster(const std::vector<double>& affinity, int n,
                                           const SpectralOptions& options);

}  // namespace epserve::placement
