// Package galerasuite runs paysvc on a three-node MariaDB Galera cluster.
package galerasuite
