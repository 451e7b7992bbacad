# Install rules: headers, libtrainsnap, the trainsnap CLI (when built), a CMake
# package (find_package(trainsnap) -> trainsnap::trainsnap; COMPONENTS
# distributed -> trainsnap::distributed) and a pkg-config file (libtrainsnap only).
include(CMakePackageConfigHelpers)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/trainsnap
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS trainsnap EXPORT trainsnapTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# (No INCLUDES DESTINATION: the target's INSTALL_INTERFACE include directory
# already names it, and a second entry would list it twice.)
install(EXPORT trainsnapTargets NAMESPACE trainsnap::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/trainsnap)

# The optional component `distributed` (find_package(trainsnap COMPONENTS
# distributed) -> trainsnap::distributed): an export set of its own, so that
# only the consumers who ask for it need Gloo (trainsnapConfig.cmake).
set_target_properties(trainsnap_distributed PROPERTIES EXPORT_NAME distributed)
install(TARGETS trainsnap_distributed EXPORT trainsnapDistributedTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT trainsnapDistributedTargets NAMESPACE trainsnap::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/trainsnap)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/trainsnapConfig.cmake.in
  ${PROJECT_BINARY_DIR}/trainsnapConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/trainsnap)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/trainsnapConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/trainsnapConfig.cmake
              ${PROJECT_BINARY_DIR}/trainsnapConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/trainsnap)

# The .pc file locates the prefix relative to itself (relocatable installs).
file(RELATIVE_PATH TRAINSNAP_PC_TO_PREFIX "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
configure_file(${PROJECT_SOURCE_DIR}/cmake/trainsnap.pc.in ${PROJECT_BINARY_DIR}/trainsnap.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/trainsnap.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
